"""Every agent stops at once, over a real broker: the processor pages each node
``node_silent`` on its own clock; while the broker itself is away it pages nobody
(the consumer is not listening: that silence is the broker's, not the nodes')."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import frame, wait_for
from tests.core.test_silent_takeover import silent_alerts
from tests.servers import Server

pytestmark = pytest.mark.kafka
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
NODES = ("a", "b", "c")
SILENT_MIN_S = 5.0


def start(kafka: Server, tmp_path: Path) -> tuple[Processor, KafkaProducer, str, Path,
                                                   threading.Event, threading.Thread]:
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 2)
    db = tmp_path / "store.db"
    processor = Processor(SqliteStore(db),
                          [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))])
    consumer = KafkaConsumer(kafka.address, topic, f"processors-{run}", **FAST)
    stop = threading.Event()
    thread = threading.Thread(target=processor.run, args=(consumer, stop, 100), daemon=True)
    thread.start()
    return processor, KafkaProducer(kafka.address), topic, db, stop, thread


def agents(producer: KafkaProducer, topic: str, seconds: float) -> int:
    """Every node sends a live frame every 0.25 s for ``seconds``; frames sent."""
    sent = 0
    end = time.time() + seconds
    while time.time() < end:
        for n in NODES:
            producer.send(topic, encode(frame(n, time.time())), n.encode())
            sent += 1
        producer.flush(10)
        time.sleep(0.25)
    return sent


def test_every_agent_stopping_pages_each_node_over_kafka(kafka: Server, tmp_path: Path
                                                          ) -> None:
    processor, producer, topic, db, stop, thread = start(kafka, tmp_path)
    try:
        wait_for(lambda: processor.ownership.owned, timeout_s=30)
        sent = agents(producer, topic, 3.0)
        last = time.time()
        wait_for(lambda: processor.stats.frames == sent, timeout_s=30)
        wait_for(lambda: len(silent_alerts(db)) == len(NODES), timeout_s=SILENT_MIN_S + 15)
        paged = time.time()
    finally:
        stop.set()
        thread.join(30)
        producer.close()
        processor.store.close()
    alerts = silent_alerts(db)
    assert sorted(a.node for a in alerts) == list(NODES)
    assert all(a.state == "firing" and a.severity == "critical" for a in alerts)
    assert all(a.started_ts - last >= SILENT_MIN_S - 0.5 for a in alerts)
    assert paged - last <= SILENT_MIN_S + 6


def test_a_broker_away_pages_no_node(own_kafka: Server, tmp_path: Path) -> None:
    processor, producer, topic, db, stop, thread = start(own_kafka, tmp_path)
    try:
        wait_for(lambda: processor.ownership.owned, timeout_s=30)
        sent = agents(producer, topic, 3.0)
        wait_for(lambda: processor.stats.frames == sent, timeout_s=30)
        own_kafka.stop()
        time.sleep(3 * SILENT_MIN_S)
        assert silent_alerts(db) == []
    finally:
        stop.set()
        thread.join(30)
        producer.close()
        processor.store.close()
