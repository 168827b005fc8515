"""One processor over Tansu, the default 12-partition topic, and a producer that does not
key its frames (an older agent, another tool): its frames land on every partition, and the
one member owns them all, so every frame is stored and the node is never paged silent.

Before, only the frames on the partition the node's name maps to were taken: 11 of 12 were
dead letters, and the node was paged ``node_silent`` "has sent nothing" while it sent.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaProducer as ClientProducer

from fleetwatch.codec import encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import frame, wait_for
from tests.core.test_silent_takeover import silent_alerts
from tests.servers import Server
from tests.store.helpers import stored

pytestmark = pytest.mark.kafka
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
PARTITIONS = 12
SILENT_MIN_S = 5.0


def test_one_member_stores_every_frame_of_a_producer_with_no_key(kafka: Server,
                                                                tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, dead = f"frames-{run}", f"frames-{run}.dead"
    ensure_topic(kafka.address, topic, PARTITIONS)
    ensure_topic(kafka.address, dead, 1)
    db = tmp_path / "store.db"
    store = SqliteStore(db)
    letters = KafkaProducer(kafka.address)
    member = Processor(store, [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))],
                       dead_letters=letters, dead_letter_topic=dead)
    consumer = KafkaConsumer(kafka.address, topic, f"processors-{run}", **FAST)
    stop = threading.Event()
    thread = threading.Thread(target=member.run, args=(consumer, stop, 100), daemon=True)
    thread.start()
    raw = ClientProducer(bootstrap_servers=kafka.address)  # no key, as the old tool sends
    sent = 0
    try:
        wait_for(lambda: bool(member.ownership.owned)
                 and len(member.ownership.owned) == PARTITIONS, timeout_s=60)
        home = consumer.partition_of(b"k03")
        assert home is not None
        # Its first frame on its name's partition, then every 0.25 s on each of the others
        # in turn (as a producer with no key spreads them), past the silence limit.
        others = [p for p in range(PARTITIONS) if p != home[1]]
        raw.send(topic, encode(frame("k03", time.time())), partition=home[1])
        end = time.time() + SILENT_MIN_S + 6.0
        while time.time() < end:
            time.sleep(0.25)  # each frame its own instant (the store keeps one a ms)
            raw.send(topic, encode(frame("k03", time.time())),
                     partition=others[sent % len(others)])
            sent += 1
            raw.flush(10)
        wait_for(lambda: member.stats.frames + member.stats.dead_letters >= sent + 1,
                 timeout_s=60)
        assert member.stats.dead_letters == 0 and member.stats.by_reason == {}
        wait_for(lambda: stored(db) >= sent + 1, timeout_s=30)
    finally:
        stop.set()
        thread.join(30)
        raw.close()
        letters.close()
        store.close()
    assert sent >= 2 * len(others)  # every partition had some
    assert member.stats.frames == sent + 1 and stored(db) == sent + 1
    assert silent_alerts(db) == []
