"""A frame's message key is its node's name, or the frame is a dead letter.

Each processor member judges the nodes of its partitions, and a node's partition is where
its name's key puts it. A frame of live node g1 under a key that maps to the other member's
partition made that member page g1 silent (it never sees g1 again) until it was forgotten 7
days later. Over the in-process bus and a real SQLite store; the two members over Tansu:
``tests/integration/test_frame_key_kafka.py``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.frame_key import KeylessLog
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


def keyless(node: str, partition: int, offset: int, ts: float = T0) -> Message:
    return Message(encode(frame(node, ts)), None, TOPIC, partition, offset)


def test_one_member_takes_every_frame_with_no_key_wherever_it_lands(tmp_path: Path) -> None:
    """A producer that does not key its frames (an older agent, another tool) spreads
    them over the topic's partitions; the one member owns every node's partition, so all
    are its node's own. Before, 11 of 12 were dead letters and the node was paged silent."""
    db = tmp_path / "s.db"
    bus = MemoryBus()
    processor = Processor(SqliteStore(db), dead_letters=bus.producer(), dead_letter_topic=DEAD)
    processor.ownership.locate = lambda key: (TOPIC, 6)
    processor.ownership.assigned([(TOPIC, p) for p in range(12)])
    processor.handle([keyless("k03", p, 0, T0 + p) for p in range(12)])
    processor.store.close()
    assert processor.stats.frames == 12 and processor.stats.dead_letters == 0
    assert stored(db) == 12 and not bus.messages(DEAD)
    assert dict(processor.ownership.placement()) == {("c1", "k03"): (TOPIC, 6)}


def test_a_frame_with_no_key_is_taken_by_the_member_that_owns_its_node(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Several members: a keyless frame on any partition of the member that owns its
    node's partition is taken; on another member's it is refused there (that member does
    not judge the node), said per node with what to do."""
    store = SqliteStore(tmp_path / "s.db")
    bus = MemoryBus()
    processor = Processor(store, dead_letters=bus.producer(), dead_letter_topic=DEAD)
    home = {"g1": 0, "g2": 3}
    processor.ownership.locate = lambda key: (TOPIC, home[key.decode()])
    processor.ownership.assigned([(TOPIC, 0), (TOPIC, 1)])  # g2's partition 3: another's
    with caplog.at_level(logging.WARNING, "fleetwatch.pipeline.processor"):
        processor.handle([keyless("g1", 0, 0), keyless("g1", 1, 0, T0 + 1),
                          keyless("g2", 0, 1), keyless("g2", 1, 1, T0 + 1)])
    said = reasons(bus)
    assert processor.stats.frames == 2 and processor.stats.by_reason == {"key": 2}
    assert len(said) == 2 and all(r.startswith("no key: the frame of node 'g2'") for r in said)
    assert f"not on {TOPIC}/3, where its name maps, which another processor" in said[0]
    warned = [r.getMessage() for r in caplog.records if "sends frames with no" in r.getMessage()]
    assert len(warned) == 1  # the second of the same node within the interval: counted
    assert "node 'g2' (c1/r1/g2)" in warned[0] and f"partition {TOPIC}/3" in warned[0]
    assert "may page the node node_silent" in warned[0]
    assert "Key its frames by the node's name" in warned[0]
    # Where the topic's partitions are not known, a keyless frame cannot be placed: refused.
    processor.ownership.locate = lambda key: None
    processor.handle([keyless("g1", 0, 2, T0 + 2)])
    assert processor.stats.frames == 2 and processor.stats.by_reason == {"key": 3}
    store.close()


def test_the_keyless_warning_is_said_once_per_node_and_interval() -> None:
    now = [0.0]
    lines: list[str] = []
    log = KeylessLog(every_s=600, clock=lambda: now[0], say=lines.append)
    where = (TOPIC, 3)
    for t in (0.0, 10.0, 20.0, 599.0):
        now[0] = t
        log.refused(keyless("g2", 0, int(t)), frame("g2"), where)
    log.refused(keyless("g5", 0, 1), frame("g5"), where)
    now[0] = 700.0
    log.refused(keyless("g2", 1, 7), frame("g2"), where)
    assert len(lines) == 3
    assert "node 'g2'" in lines[0] and "the first" in lines[0]
    assert "node 'g5'" in lines[1]
    assert "4 in the last 700 s: latest frames/1@7" in lines[2]


def test_frames_of_its_own_node_refused_for_their_key_page_no_silence(tmp_path: Path) -> None:
    """A producer that keys its frames by another name (a host's full name): its frames are
    dead letters, and the member that owns the node hears of it all the same, as of a node
    whose frames are refused for their clock: not paged "sent nothing" while it sends;
    paged once it stops. Another member's node is not judged here at all."""
    bus = MemoryBus()
    now = [T0]
    silence = NodeSilence(DetectorsConfig(silent_min_s=30.0))
    processor = Processor(SqliteStore(tmp_path / "s.db"), [silence],
                          dead_letters=bus.producer(), dead_letter_topic=DEAD,
                          clock=lambda: now[0])
    home = {"g1": 0, "g2": 0, "g9": 1}
    processor.ownership.locate = lambda key: (TOPIC, home.get(key.decode(), 0))
    processor.ownership.assigned([(TOPIC, 0)])
    pages: list[str] = []
    # 150 s: g1 keyed well, g2 under its full name after its first frame, g9 another's.
    for i in range(30):
        now[0] = T0 + 5 * i
        processor.handle([
            Message(encode(frame("g1", now[0])), b"g1", TOPIC, 0, 3 * i),
            Message(encode(frame("g2", now[0])), b"g2.example.com" if i else b"g2", TOPIC,
                    0, 3 * i + 1),
            Message(encode(frame("g9", now[0])), b"g1", TOPIC, 0, 3 * i + 2)])
        pages += [a.node for a in processor.alerts.open if a.rule == "node_silent"]
    assert pages == [] and processor.stats.by_reason == {"key": 59}
    for i in range(30, 50):  # g2 stops; g1 goes on
        now[0] = T0 + 5 * i
        processor.handle([Message(encode(frame("g1", now[0])), b"g1", TOPIC, 0, 100 + i)])
    silent = {a.node for a in processor.alerts.open if a.rule == "node_silent"}
    processor.store.close()
    assert silent == {"g2"}


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
