"""Most of a hall loses power, over a real broker: 30 nodes report every second, 28 stop at
once, 2 send on. Each of the 28 is paged ``node_silent`` within its limit and a few
seconds, not once the 2 left have sent ``2 x 30`` frames (the dead nodes' last frames held
the stream's clock back until then: paged 30 s after they stopped here, not 10 s; 1,000
nodes at 5 s with 10 left on a UPS, ~17 min late)."""

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
NODES = tuple(f"n{i:02d}" for i in range(30))
LIVE = NODES[:2]
SILENT_MIN_S = 10.0


def send(producer: KafkaProducer, topic: str, names: tuple[str, ...], seconds: float,
         until: threading.Event | None = None) -> float:
    """``names`` each send a live frame every second, for ``seconds`` or until set; the
    time of the last frames."""
    end, last = time.time() + seconds, 0.0
    while time.time() < end and not (until is not None and until.is_set()):
        last = time.time()
        for n in names:
            producer.send(topic, encode(frame(n, last)), n.encode())
        producer.flush(10)
        time.sleep(max(0.0, last + 1.0 - time.time()))
    return last


def test_most_of_a_hall_losing_power_is_paged_within_its_limit(kafka: Server,
                                                               tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 2)
    db = tmp_path / "store.db"
    processor = Processor(SqliteStore(db),
                          [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))])
    consumer = KafkaConsumer(kafka.address, topic, f"processors-{run}", **FAST)
    stop, until = threading.Event(), threading.Event()
    thread = threading.Thread(target=processor.run, args=(consumer, stop, 100), daemon=True)
    thread.start()
    producer = KafkaProducer(kafka.address)
    sender = None
    try:
        wait_for(lambda: processor.ownership.owned, timeout_s=30)
        died = send(producer, topic, NODES, 8.0)   # every node learns its 1 s interval
        sender = threading.Thread(target=send, args=(producer, topic, LIVE, 120.0, until),
                                  daemon=True)
        sender.start()                             # 28 stop; 2 send on
        dead = len(NODES) - len(LIVE)
        wait_for(lambda: len(silent_alerts(db)) >= dead, timeout_s=SILENT_MIN_S + 40)
        paged = time.time()
    finally:
        until.set()
        if sender is not None:
            sender.join(30)
        stop.set()
        thread.join(30)
        producer.close()
        processor.store.close()
    alerts = silent_alerts(db)
    assert sorted(a.node for a in alerts) == sorted(NODES[2:])
    assert all(a.state == "firing" for a in alerts)
    assert all(a.started_ts - died >= SILENT_MIN_S - 0.5 for a in alerts)
    assert paged - died <= SILENT_MIN_S + 8, paged - died
