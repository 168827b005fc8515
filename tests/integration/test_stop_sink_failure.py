"""SIGTERM with a webhook that refuses connections (r23): the stop line blamed
``processor.stop_timeout_s`` for any alert change a sink gave up at close, sending the user
to tune the wrong setting. Now it names the sink and its error, and mentions the timeout only
where the deadline cut the delivery.

A real ``fleetwatch process`` on a real Tansu broker with a SQLite store; an XID 79 frame
opens a critical alert whose change the webhook (a port nothing listens on) never takes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from tests.servers import Server, free_port

pytestmark = pytest.mark.kafka


def test_sigterm_names_the_sink_that_failed_not_the_stop_timeout(kafka: Server,
                                                                 tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 1)
    hook = f"http://127.0.0.1:{free_port()}/hook"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": topic + ".dead",
                "FLEETWATCH_BUS_GROUP": f"g-{run}", "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                "FLEETWATCH_STORE_KIND": "sqlite", "FLEETWATCH_STORE_PATH": str(tmp_path / "s.db"),
                "FLEETWATCH_ALERTS_WEBHOOK_URL": hook, "FLEETWATCH_ALERTS_SINK_ATTEMPTS": "1",
                "FLEETWATCH_PROCESSOR_METRICS_PORT": "0",
                "FLEETWATCH_PROCESSOR_STOP_TIMEOUT_S": "15", "PYTHONUNBUFFERED": "1"})
    log = tmp_path / "process.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        p = KafkaProducer(kafka.address)
        f = Frame("c1", "r1", "n1", time.time(), (GpuReading(
            0, "GPU-1", "H100", {"gpu_temp_c": 50.0}, xids=(79,)),))
        p.send(topic, encode(f), key=b"n1")
        p.flush(30)
        p.close()
        deadline = time.monotonic() + 90
        while "alert sink webhook" not in log.read_text():  # tried, refused, held
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    finally:
        proc.kill()
    out = log.read_text()
    assert code == 0, out[-3000:]
    (line,) = [x for x in out.splitlines() if " stopped" in x and "batches in hand" in x]
    assert re.search(r"; failed at stop: alert sink webhook: 1 alert changes not delivered "
                     r"\(the last try at close failed; last error: webhook \S+ unreachable: "
                     r".*Connection refused", line), line
    assert "stop_timeout_s" not in line, line
    assert "Traceback" not in out, out[-3000:]
