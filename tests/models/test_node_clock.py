"""The silent-node rule's clock: frames from a node whose clock runs ahead, or one frame
stamped a day ahead, must not page the healthy nodes or stop the clock; a gap of the whole
fleet must not stop it either. Batches are small, as a live processor's polls are."""

from __future__ import annotations

from fleetwatch.models.health import NodeSilence
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node

HEALTHY = ("a", "b", "c")


def test_a_node_ten_minutes_ahead_pages_no_one_in_small_batches() -> None:
    d = NodeSilence()
    found = []
    for k in range(120):                       # 10 min of 5 s frames, one or two a batch
        t = 1000 + 5.0 * k
        found += d.update([node(t, [busy(60)], name=HEALTHY[k % 3])])
        found += d.update([node(t + 600, [busy(60)], name="skewed")])
    assert found == []
    assert d.now <= 1000 + 5.0 * 119


def test_one_frame_a_day_ahead_neither_pages_nor_stops_the_clock() -> None:
    d, book = NodeSilence(), AlertBook()
    changes = []
    for k in range(200):
        t = 1000 + 5.0 * k
        frames = [node(t, [busy(60)], name=HEALTHY[k % 3])]
        if k < 20:
            frames.append(node(t, [busy(60)], name="dies"))   # sends for 100 s, then stops
        if k == 30:
            frames = [node(t + 86400, [busy(60)], name="bogus")]
        found = d.update(frames)
        step = book.observe(frames, found)
        book.apply(step)
        changes.append(step)
    silent = {f.node for c in changes for f in c}
    assert silent == {"dies"}                               # the dead node, no healthy one
    (alert,) = book.open
    assert alert.node == "dies" and alert.updated_ts == 1000 + 5.0 * 199
    # Its alert is written when it changes (and every refresh_s), not on every batch.
    assert sum(1 for c in changes if c) < 20


def test_a_gap_of_the_whole_fleet_moves_the_clock_once_a_second_node_vouches() -> None:
    d = NodeSilence()
    for k in range(12):
        for n in HEALTHY:
            d.update([node(1000 + 5.0 * k, [busy(60)], name=n)])
    d.update([node(5000, [busy(60)], name="a")])   # a frame after an hour and more
    assert d.now == 1055.0                            # one node's word is not enough
    assert d.update([node(5001, [busy(60)], name="b")]) == []
    assert d.now == 5001.0
    assert [f.node for f in d.update([node(5005, [busy(60)], name="a"),
                                      node(5006, [busy(60)], name="b")])] == []


def test_a_node_alone_is_its_own_witness() -> None:
    d = NodeSilence()
    d.update([node(1000, [busy(60)], name="only")])
    d.update([node(9000, [busy(60)], name="only")])
    assert d.now == 9000.0
