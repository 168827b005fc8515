"""A processor restarted on a backlog, over a real broker: the partitions are read
unevenly (the fetches of one drained before another's), yet no node that kept sending is
paged ``node_silent``; a node that died in the backlog is, and so is one that died while
no processor ran (the store names it)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import wait_for
from tests.core.test_silent_takeover import silent_alerts
from tests.servers import Server

pytestmark = pytest.mark.kafka
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000,
        # Small fetches: a partition's backlog comes in many, drained one after another.
        "max_partition_fetch_bytes": 16 << 10}
NODES = tuple(f"node-{k:02d}" for k in range(40))
GONE, DIES = "node-07", "node-21"  # dead while no processor ran; dead in the backlog
METRICS = ("gpu_temp_c", "gpu_util_pct", "gpu_power_w", "gpu_fb_used_bytes",
           "gpu_sm_clock_mhz", "gpu_mem_temp_c")


def frame(node: str, ts: float) -> Frame:
    return Frame("c1", "r1", node, ts, tuple(
        GpuReading(g, f"GPU-{node}-{g}", "H100", {m: 50.0 + g for m in METRICS})
        for g in range(8)))


def write(producer: KafkaProducer, topic: str, start: float, end: float,
          sends: dict[str, float]) -> int:
    """Every node of ``sends`` a frame every 5 s from ``start`` to ``end`` (until its
    own last time); frames sent."""
    sent, t = 0, start
    while t <= end:
        for n, last in sends.items():
            if t <= last:
                producer.send(topic, encode(frame(n, t)), n.encode())
                sent += 1
        t += 5.0
    producer.flush(30)
    return sent


def consume(kafka: Server, topic: str, group: str, db: Path, frames: int) -> None:
    """A processor on ``topic`` until it has stored ``frames`` frames and read its
    partitions to their end, then a few seconds more (under a silence limit)."""
    processor = Processor(SqliteStore(db), [NodeSilence(DetectorsConfig())])
    consumer = KafkaConsumer(kafka.address, topic, group, **FAST)
    stop = threading.Event()
    thread = threading.Thread(target=processor.run, args=(consumer, stop, 100), daemon=True)
    thread.start()
    try:
        wait_for(lambda: processor.stats.frames >= frames, timeout_s=120)
        wait_for(lambda: consumer.lag() == 0, timeout_s=30)
        time.sleep(3.0)
    finally:
        stop.set()
        thread.join(30)
        consumer.close()  # leaves the group: the next processor takes every partition
        processor.store.close()


def test_a_backlog_read_after_a_restart_pages_only_the_dead_nodes(kafka: Server,
                                                                   tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, group, db = f"frames-{run}", f"processors-{run}", tmp_path / "store.db"
    ensure_topic(kafka.address, topic, 4)
    producer = KafkaProducer(kafka.address)
    now = time.time()
    try:
        # The processor ran while every node sent, then stopped: GONE died meanwhile,
        # the others sent 4 minutes more (DIES stopping after 40 s of them).
        first = write(producer, topic, now - 330, now - 270, dict.fromkeys(NODES, now))
        consume(kafka, topic, group, db, first)
        assert silent_alerts(db) == []
        sends = dict.fromkeys(NODES, now)
        sends[GONE] = now - 270
        sends[DIES] = now - 225
        backlog = write(producer, topic, now - 265, now, sends)
    finally:
        producer.close()
    consume(kafka, topic, group, db, backlog)
    alerts = silent_alerts(db)
    assert sorted({a.node for a in alerts}) == sorted([GONE, DIES])
    assert all(a.severity == "critical" and a.state == "firing" for a in alerts)
