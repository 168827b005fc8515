"""The frames topic's partition count changes under a running group (a broker that came
back empty made it again with 4 partitions instead of 12, as Tansu does): a node's frames
then come through another partition number. Its alerts follow the node, not the number:

* a member that owns the node's new partition keeps its open alerts (re-sent to
  Alertmanager, resolved when it reports again), even though the partition the node was
  built under no longer exists (the r23 mass run: 22 dead nodes' alerts were re-sent by
  nobody, Alertmanager let them expire and told the pager they had recovered);
* a member that does not own it drops them, and the member that does adopts them from
  the store, though no frame of the node comes (it is dead).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.bus import Message, Partition
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_partition_back import silent
from tests.core.test_processor_hardening import frame

TOPIC = "frames"
T = time.time() - 600
# Where each node's frames go under 12 partitions, and under 4.
UNDER = {12: {"node-a": 7, "node-b": 2}, 4: {"node-a": 1, "node-b": 2}}


class Topic:
    def __init__(self) -> None:
        self.count = 12

    def locate(self, key: bytes) -> Partition:
        return (TOPIC, UNDER[self.count][key.decode()])


def member(store: SqliteStore, topic: Topic) -> tuple[Ownership, AlertBook, list, list]:
    book = AlertBook(requirements={"node_silent": ()})
    dropped: list[set[str]] = []
    expected: list = []
    own = Ownership(store, book, on_revoked=[dropped.append], on_expected=[expected.extend])
    own.locate = topic.locate
    return own, book, dropped, expected


def parts(*numbers: int) -> list[Partition]:
    return [(TOPIC, n) for n in numbers]


def start(store: SqliteStore, own: Ownership, book: AlertBook) -> None:
    """Both nodes reported under 12 partitions; node-a then died and is paged."""
    frames = [frame("node-a", T), frame("node-b", T)]
    store.write(frames)
    own.build(frames, [Message(b"", b"node-a", TOPIC, 7, 0),
                       Message(b"", b"node-b", TOPIC, 2, 0)])
    dead = silent("node-a", T + 70)
    book.load([dead])
    store.write_alerts([dead])


def test_a_dead_nodes_alert_stays_with_the_member_that_owns_its_node_now(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, topic = SqliteStore(tmp_path / "store.db"), Topic()
    own, book, dropped, _ = member(store, topic)
    own.assigned(parts(*range(12)))
    start(store, own, book)
    # The broker comes back empty and makes the topic with 4 partitions; this member
    # (the only one) gets them all: partition 7 has moved away, node-a now maps to 1.
    own.revoked(parts(*range(12)))
    topic.count = 4
    with caplog.at_level(logging.WARNING, "fleetwatch"):
        own.assigned(parts(0, 1, 2, 3))
    assert dropped == []  # neither the notifier nor the detectors forget it
    assert [(a.node, a.state) for a in book.open] == [("node-a", "firing")]
    assert "partition count changed" in caplog.text
    # node-a reports again, through partition 1: its alert resolves here.
    back = [frame("node-a", T + 300)]
    own.build(back, [Message(b"", b"node-a", TOPIC, 1, 5)])
    changes = book.observe(back, [])
    assert [(a.node, a.state) for a in changes] == [("node-a", "resolved")]
    store.close()


def test_a_dead_nodes_alert_is_adopted_by_its_new_owner(tmp_path: Path) -> None:
    store, topic = SqliteStore(tmp_path / "store.db"), Topic()
    first, book1, dropped, _ = member(store, topic)
    first.assigned(parts(*range(12)))
    start(store, first, book1)
    # Two members now: the first keeps partition 2 (node-b), the second gets 1 (node-a),
    # which the first never owned under that number.
    first.revoked(parts(*range(12)))
    topic.count = 4
    second, book2, _, expected = member(store, topic)
    first.assigned(parts(0, 2))
    second.assigned(parts(1, 3))
    assert dropped == [{"node-a"}] and book1.open == []
    # node-a is dead: no frame of it comes; a frame of nothing (the second member's batch
    # is empty) is enough for it to take node-a and its alert over.
    second.build([], None)
    assert [(a.node, a.state) for a in book2.open] == [("node-a", "firing")]
    assert [e[2] for e in expected] == ["node-a"]
    store.close()
