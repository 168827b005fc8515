"""Every agent stops at once, over a real broker: the processor pages each node
``node_silent`` on its own clock; while the broker itself is away, or hangs, it pages
nobody (the consumer is not listening: that silence is the broker's, not the nodes')."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus import BusError
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


def agents_until(producer: KafkaProducer, topic: str, until: threading.Event
                 ) -> threading.Thread:
    """Every node goes on sending a live frame every 0.25 s until ``until`` is set: the
    fleet is fine (once the broker is gone, its frames do not get through)."""
    def send() -> None:
        while not until.is_set():
            try:
                for n in NODES:
                    producer.send(topic, encode(frame(n, time.time())), n.encode())
                producer.flush(2)
            except BusError:
                pass
            until.wait(0.25)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_a_broker_away_pages_no_node(own_kafka: Server, tmp_path: Path) -> None:
    """Tansu goes on serving for some seconds after SIGTERM; the agents go on sending
    meanwhile (a fleet that is fine does). From its exit, for 3 x silent_min_s, no node
    is paged. (Agents stopped before the broker would be silent, and rightly paged,
    while it still serves.)"""
    processor, producer, topic, db, stop, thread = start(own_kafka, tmp_path)
    try:
        wait_for(lambda: processor.ownership.owned, timeout_s=30)
        sent = agents(producer, topic, 3.0)
        wait_for(lambda: processor.stats.frames == sent, timeout_s=30)
        until = threading.Event()
        sender = agents_until(producer, topic, until)
        own_kafka.stop()                  # returns once the broker process has exited
        gone = time.monotonic()
        until.set()
        sender.join(30)
        time.sleep(max(0.0, 3 * SILENT_MIN_S - (time.monotonic() - gone)))
        assert silent_alerts(db) == []
    finally:
        stop.set()
        thread.join(30)
        producer.close()
        processor.store.close()


def test_a_broker_that_hangs_pages_no_node(own_kafka: Server, tmp_path: Path) -> None:
    """A broker that hangs (SIGSTOP: its sockets stay open, nothing answers) looks
    connected to kafka-python, its coordinator kept, until a request times out: for
    3 x silent_min_s no node is paged, nor once it answers again and frames come."""
    processor, producer, topic, db, stop, thread = start(own_kafka, tmp_path)
    assert own_kafka.proc is not None
    try:
        wait_for(lambda: processor.ownership.owned, timeout_s=30)
        sent = agents(producer, topic, 3.0)
        wait_for(lambda: processor.stats.frames == sent, timeout_s=30)
        own_kafka.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(3 * SILENT_MIN_S)
            assert silent_alerts(db) == []
        finally:
            own_kafka.proc.send_signal(signal.SIGCONT)
        sent += agents(producer, topic, 3.0)  # it answers again: the fleet's frames come
        wait_for(lambda: processor.stats.frames == sent, timeout_s=60)
        assert silent_alerts(db) == []
    finally:
        stop.set()
        thread.join(30)
        producer.close()
        processor.store.close()
