"""SIGTERM with the store and Alertmanager hung (deploy finding 5, r22): the stop's steps
each had a timeout of their own and their sum, 72 s, passed systemd's TimeoutStopSec of
60 s. Now the whole stop stays within ``processor.stop_timeout_s`` and says what it left.

A real ``fleetwatch process`` on a real Tansu broker, its store and Alertmanager a port
that takes connections and never answers; one frame in hand when SIGTERM comes (before,
that batch alone took 20 s, and the hung write held the exit until its own timeout)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from tests.bus.test_topic_check_leak import black_hole  # noqa: F401 - a fixture
from tests.servers import Server

pytestmark = pytest.mark.kafka


def test_sigterm_with_the_store_and_alertmanager_hung_stops_within_the_budget(
        kafka: Server, black_hole: str, tmp_path: Path) -> None:  # noqa: F811
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": topic + ".dead",
                "FLEETWATCH_BUS_GROUP": f"g-{run}", "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                "FLEETWATCH_STORE_KIND": "victoriametrics",
                "FLEETWATCH_STORE_URL": f"http://{black_hole}",
                "FLEETWATCH_ALERTS_ALERTMANAGER_URL": f"http://{black_hole}",
                "FLEETWATCH_PROCESSOR_METRICS_PORT": "0",
                "FLEETWATCH_PROCESSOR_STOP_TIMEOUT_S": "15", "PYTHONUNBUFFERED": "1"})
    log = tmp_path / "process.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        # Once assigned, it asks the store which nodes its partition holds: that read
        # times out first, then frames are held while the store is away.
        deadline = time.monotonic() + 60
        while "store unavailable" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        p = KafkaProducer(kafka.address)
        f = Frame("c1", "r1", "n1", time.time(), (GpuReading(0, "GPU-1", "H100",
                                                             {"gpu_temp_c": 50.0}),))
        p.send(topic, encode(f), key=b"n1")
        p.flush(30)
        p.close()
        threading.Event().wait(3)  # polled and held, the store still away
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        took = time.monotonic() - t0
    finally:
        proc.kill()
    out = log.read_text()
    assert code == 0, out[-3000:]
    assert took < 15 + 3, (took, out[-3000:])
    assert re.search(r"stopping with 1 batches not finished \(the store did not answer "
                     r"within [\d.]+ s\); they will be replayed", out), out[-3000:]
    assert "Traceback" not in out, out[-3000:]
