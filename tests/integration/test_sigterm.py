"""SIGTERM (systemd, docker, Kubernetes) stops ``fleetwatch process`` as Ctrl-C does.

A real ``fleetwatch process`` subprocess consumes a steady stream from a
real broker into SQLite in small batches, so that batches are always in
hand; it gets a real SIGTERM mid-stream. It must finish those batches: exit
0, say so in one line, and leave the group's committed offsets exactly at
what the store holds (nothing stored and left uncommitted, nothing
committed and not stored).
"""

from __future__ import annotations

import os
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
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.bus.test_kafka import committed
from tests.servers import Server
from tests.store.helpers import stored

pytestmark = pytest.mark.kafka


def stream(kafka: Server, topic: str, stop: threading.Event, sent: list[int]) -> None:
    """About 2,000 one-GPU frames a second until ``stop``."""
    p = KafkaProducer(kafka.address, linger_ms=2)
    t0 = time.time() - 3600
    i = 0
    while not stop.is_set():
        for _ in range(100):
            node = f"node-{i % 50:02d}"
            f = Frame("c1", "r1", node, t0 + i // 50, (GpuReading(0, f"GPU-{node}", "H100",
                                                                  {"gpu_temp_c": 50.0}),))
            p.send(topic, encode(f), key=node.encode())
            i += 1
        p.flush(30)
        sent[0] = i
        time.sleep(0.05)
    p.close()


def test_sigterm_finishes_the_batches_in_hand_commits_and_says_so(
        kafka: Server, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, group = f"frames-{run}", f"processors-{run}"
    ensure_topic(kafka.address, topic, 3)
    db = tmp_path / "store.db"
    SqliteStore(db).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": topic + ".dead",
                "FLEETWATCH_BUS_GROUP": group, "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                "FLEETWATCH_STORE_PATH": str(db), "FLEETWATCH_PROCESSOR_METRICS_PORT": "0",
                "FLEETWATCH_PROCESSOR_MAX_BATCH": "40"})
    log = tmp_path / "process.log"
    stop_stream, sent = threading.Event(), [0]
    producer = threading.Thread(target=stream, args=(kafka, topic, stop_stream, sent))
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    producer.start()
    try:
        deadline = time.monotonic() + 90
        while stored(db) < 3000:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    finally:
        stop_stream.set()
        producer.join(60)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 0, text[-3000:]
    lines = [line for line in text.splitlines() if "stopped on SIGTERM" in line]
    assert len(lines) == 1 and "finished the" in lines[0], text[-3000:]
    assert sum(committed(kafka, group).values()) == stored(db)  # one sample a frame
    assert stored(db) < sent[0]  # it was stopped mid-stream
