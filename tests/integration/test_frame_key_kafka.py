"""Two processor members over Tansu: a frame of a live node under a key that maps to the
other member's partition pages nobody, and is a dead letter naming the key and the node.

Before, the member that does not own g1's partition took the frame, never heard of g1
again and paged it ``node_silent`` (open until g1 was forgotten, 7 days later). A frame with
no key is taken on its node's own partition and refused on another.
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
from tests.integration.test_poison import read_all
from tests.servers import Server

pytestmark = pytest.mark.kafka
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
NODES = ("g1", "g2", "g3")
SILENT_MIN_S = 5.0


def live(producer: KafkaProducer, topic: str, seconds: float) -> None:
    """Every node sends a frame every 0.25 s, keyed by its name (as the agent does)."""
    end = time.time() + seconds
    while time.time() < end:
        for n in NODES:
            producer.send(topic, encode(frame(n, time.time())), n.encode())
        producer.flush(10)
        time.sleep(0.25)


def test_a_frame_under_another_partitions_key_pages_no_member(kafka: Server,
                                                             tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, dead = f"frames-{run}", f"frames-{run}.dead"
    ensure_topic(kafka.address, topic, 2)
    ensure_topic(kafka.address, dead, 1)
    db = tmp_path / "store.db"
    SqliteStore(db).close()  # the schema made once, not raced by the two members
    stores = [SqliteStore(db) for _ in range(2)]
    producer = KafkaProducer(kafka.address)  # the agents'
    letters_out = [KafkaProducer(kafka.address) for _ in stores]  # each member's own
    members = [Processor(s, [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))],
                         dead_letters=out, dead_letter_topic=dead)
               for s, out in zip(stores, letters_out, strict=True)]
    consumers = [KafkaConsumer(kafka.address, topic, f"processors-{run}", **FAST)
                 for _ in members]
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(c, stop, 100), daemon=True)
               for p, c in zip(members, consumers, strict=True)]
    for t in threads:
        t.start()
    raw = ClientProducer(bootstrap_servers=kafka.address)
    try:
        wait_for(lambda: all(p.ownership.owned and len(p.ownership.owned) == 1
                             for p in members), timeout_s=60)
        home = consumers[0].partition_of(b"g1")
        assert home is not None
        stray = next(k for k in (f"k{i}".encode() for i in range(100))
                     if consumers[0].partition_of(k) != home)
        [other] = [p for p in members if home not in p.ownership.owned]
        live(producer, topic, 2.0)
        producer.send(topic, encode(frame("g1", time.time())), stray)
        # No key: g1's own partition takes it, the other refuses it.
        raw.send(topic, encode(frame("g1", time.time())), partition=home[1])
        raw.send(topic, encode(frame("g1", time.time())), partition=1 - home[1])
        raw.flush(10)
        live(producer, topic, SILENT_MIN_S + 6.0)  # past the limit, g1 alive throughout
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        raw.close()
        for out in [producer, *letters_out]:
            out.close()
        for s in stores:
            s.close()
    assert silent_alerts(db) == []
    assert other.stats.by_reason == {"key": 2}
    assert sum(p.stats.dead_letters for p in members) == 2
    # A dead letter whose send was retried may be on the topic twice (at least once).
    letters = {dict(m.headers)["source_offset"]: m for m in read_all(kafka, dead, 2, 15.0)}
    reasons = sorted(dict(m.headers)["reason"].decode() for m in letters.values())
    assert len(reasons) == 2 and [m.key for m in letters.values() if m.key] == [stray]
    assert reasons[0].startswith(f"key {stray!r} is not the frame's node 'g1' (c1/r1/g1)")
    assert reasons[1].startswith("no key: the frame of node 'g1' (c1/r1/g1) is on "
                                 f"{topic}/{1 - home[1]}, not on {topic}/{home[1]}")
