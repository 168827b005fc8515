"""A processor upgrade (SIGTERM, a new ``fleetwatch process``) on a real Tansu broker with
a real Alertmanager and one SQLite store: one GPU at 95 °C fires gpu_temp_critical and
gpu_temp_high, the warning muted by its critical (a same-GPU cover, which Alertmanager has
no rule for) and never posted. The new processor takes both over and re-sends to
Alertmanager only the critical: what Alertmanager's API says it holds is counted. Before,
it posted the warning too and re-sent it every resend interval."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server, alertmanager

pytestmark = pytest.mark.kafka


@pytest.fixture
def am(tmp_path: Path) -> Iterator[Server]:
    server = alertmanager(tmp_path).start()
    yield server
    server.stop()


def in_am(am: Server, cluster: str) -> list[str]:
    url = f"http://{am.address}/api/v2/alerts?filter=" + urllib.parse.quote(
        f'cluster="{cluster}"')
    with urllib.request.urlopen(url, timeout=5) as r:
        return sorted(a["labels"]["alertname"] for a in json.load(r))


def _wait(check: object, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def test_a_restarted_processor_posts_no_alert_the_one_before_kept_from_alertmanager(
        kafka: Server, am: Server, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, cluster = f"frames-{run}", f"c{run}"
    ensure_topic(kafka.address, topic, 1)
    db = tmp_path / "store.db"
    SqliteStore(db).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": topic + ".dead",
                "FLEETWATCH_BUS_GROUP": f"g-{run}", "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                "FLEETWATCH_STORE_PATH": str(db), "FLEETWATCH_PROCESSOR_METRICS_PORT": "0",
                "FLEETWATCH_DETECTORS_SITE_TEMP_LIMIT_C": "85",
                "FLEETWATCH_DETECTORS_SITE_TEMP_FOR_S": "0", "FLEETWATCH_DETECTORS_HIGH_FOR_S": "0",
                "FLEETWATCH_ALERTS_ALERTMANAGER_URL": f"http://{am.address}",
                "FLEETWATCH_ALERTS_ALERTMANAGER_RESEND_S": "2", "PYTHONUNBUFFERED": "1"})
    producer = KafkaProducer(kafka.address)

    def send(n: int) -> None:
        t0 = time.time()
        for i in range(n):
            f = Frame(cluster, "r1", "n1", t0 + i * 0.1,
                      (GpuReading(0, "GPU-1", "H100", {"gpu_temp_c": 95.0}),))
            producer.send(topic, encode(f), key=b"n1")
        producer.flush(30)

    def start(name: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"],
                                    env=env, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=tmp_path)
        return proc, log

    first, first_log = start("first")
    second = None
    try:
        send(3)
        _wait(lambda: in_am(am, cluster) == ["gpu_temp_critical"], first, first_log, 90)
        time.sleep(5)  # two re-sends: the warning, muted from its start, is not posted
        assert in_am(am, cluster) == ["gpu_temp_critical"]
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0, first_log.read_text()[-3000:]

        second, second_log = start("second")
        # it joins the group and takes the two firing alerts over (a bound: a loaded
        # machine starts it and rebalances slower)
        _wait(lambda: "partitions assigned: " in second_log.read_text(), second, second_log, 90)
        send(3)        # it keeps judging the GPU; it re-sends every 2 s
        time.sleep(8)
        assert second.poll() is None, second_log.read_text()[-3000:]
        assert in_am(am, cluster) == ["gpu_temp_critical"], second_log.read_text()[-3000:]
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0, second_log.read_text()[-3000:]
    finally:
        producer.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    # fleetwatch's record agrees: the warning muted at Alertmanager, never sent there
    store = SqliteStore(db, read_only=True)
    notes = [(n.rule, n.outcome) for n in store.notifications(0, 1e18)
             if n.sink == "alertmanager"]
    store.close()
    assert ("gpu_temp_high", "sent") not in notes and ("gpu_temp_high", "muted") in notes
