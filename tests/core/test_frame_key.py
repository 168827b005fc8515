"""A frame's message key is its node's name, or the frame is a dead letter.

Each processor member judges the nodes of its partitions, and a node's partition is where
its name's key puts it. A frame of live node g1 under a key that maps to the other member's
partition made that member page g1 silent (it never sees g1 again) until it was forgotten 7
days later. Over the in-process bus and a real SQLite store; the two members over Tansu:
``tests/integration/test_frame_key_kafka.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.store.helpers import stored

TOPIC, DEAD = "frames", "frames.dead"
T0 = time.time() - 600


def frame(node: str, ts: float = T0) -> Frame:
    return Frame("c1", "r1", node, ts, (GpuReading(0, f"GPU-{node}", "H100",
                                                   {"gpu_temp_c": 50.0}),))


def reasons(bus: MemoryBus) -> list[str]:
    return [dict(m.headers)["reason"].decode() for m in bus.messages(DEAD)]


def test_a_frame_under_another_nodes_key_is_a_dead_letter_naming_both(tmp_path: Path) -> None:
    bus = MemoryBus()
    p = bus.producer()
    p.send(TOPIC, encode(frame("g1")), b"g1")
    p.send(TOPIC, encode(frame("g1", T0 + 1)), b"k7")
    p.send(TOPIC, encode(frame("g2", T0 + 1)), b"g2")
    p.send(TOPIC, encode(frame("g3", T0 + 1)), b"g3\n\x00")
    db = tmp_path / "s.db"
    processor = Processor(SqliteStore(db), dead_letters=p, dead_letter_topic=DEAD)
    processor.handle(bus.consumer(TOPIC, "g").poll(10, 0))
    processor.store.close()
    said = reasons(bus)
    assert len(said) == 2 and processor.stats.by_reason == {"key": 2}
    assert "key b'k7'" in said[0] and "node 'g1'" in said[0] and "c1/r1/g1" in said[0]
    assert "key the frame by its node's name" in said[0]
    assert "key b'g3\\n\\x00'" in said[1] and "node 'g3'" in said[1]
    assert [m.key for m in bus.messages(DEAD)] == [b"k7", b"g3\n\x00"]
    assert processor.stats.frames == 2 and stored(db) == 2


def test_a_frame_with_no_key_is_taken_only_on_its_nodes_partition(tmp_path: Path) -> None:
    """No key: harmless where it arrives on the partition its node's name maps to (the
    in-process bus and a one-partition topic: always); elsewhere a dead letter."""
    store = SqliteStore(tmp_path / "s.db")
    bus = MemoryBus()
    processor = Processor(store, dead_letters=bus.producer(), dead_letter_topic=DEAD)
    home = {"g1": 0, "g2": 1}
    processor.ownership.locate = lambda key: (TOPIC, home[key.decode()])
    processor.handle([Message(encode(frame("g1")), None, TOPIC, 0, 0),
                      Message(encode(frame("g2")), None, TOPIC, 0, 1),
                      Message(encode(frame("g2", T0 + 1)), None, TOPIC, 1, 0)])
    said = reasons(bus)
    assert processor.stats.frames == 2 and processor.stats.by_reason == {"key": 1}
    assert len(said) == 1 and "no key" in said[0] and "node 'g2'" in said[0]
    assert f"{TOPIC}/0" in said[0] and f"{TOPIC}/1" in said[0]
    # Where the topic's partitions are not known, a keyless frame cannot be placed: refused.
    processor.ownership.locate = lambda key: None
    processor.handle([Message(encode(frame("g1", T0 + 2)), None, TOPIC, 0, 2)])
    assert processor.stats.frames == 2 and processor.stats.by_reason == {"key": 2}
    store.close()


def test_the_in_process_bus_takes_frames_with_no_key(tmp_path: Path) -> None:
    """One partition: a frame without a key reaches the only member (``up``'s bus)."""
    bus = MemoryBus()
    p = bus.producer()
    p.send(TOPIC, encode(frame("g1")))
    consumer = bus.consumer(TOPIC, "g")
    processor = Processor(SqliteStore(tmp_path / "s.db"), dead_letters=p,
                          dead_letter_topic=DEAD)
    processor.ownership.locate = consumer.partition_of  # as ``run`` sets it
    processor.handle(consumer.poll(10, 0))
    processor.store.close()
    assert processor.stats.frames == 1 and not bus.messages(DEAD)
