"""The silent-node rule's clock: frames from a node whose clock runs ahead, or one frame
stamped a day ahead, must not page the healthy nodes or stop the clock; a gap of the whole
fleet must not stop it either. Batches are small, as a live processor's polls are."""

from __future__ import annotations

from fleetwatch.models.node_silence import NodeSilence
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
    # The dead node, and the bogus one (it sent once, then nothing), no healthy one.
    assert silent == {"dies", "bogus"}
    alerts = {a.node: a for a in book.open}
    assert alerts["dies"].updated_ts == 1000 + 5.0 * 199
    assert "its clock was 24.0 h ahead of the fleet's" in alerts["bogus"].message
    # Its alert is written when it changes (and every refresh_s), not on every batch.
    assert sum(1 for c in changes if any(a.node == "dies" for a in c)) < 20


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


def _fleet(k: int, names: tuple[str, ...] = HEALTHY, t0: float = 1000.0,
           every: float = 2.0) -> list:
    return [node(t0 + every * k, [busy(60)], name=n) for n in names]


def test_two_nodes_two_hours_ahead_do_not_vouch_each_other_into_paging_the_fleet() -> None:
    d = NodeSilence()
    found = []
    for k in range(150):                         # 5 min of 2 s frames, a node a batch
        frames = _fleet(k, (*HEALTHY, "dies") if k < 30 else HEALTHY)
        if 20 <= k < 23:                         # two skewed agents overlap for 6 s
            frames += [node(1000 + 2.0 * k + 7200, [busy(60)], name=n) for n in ("x", "y")]
        for f in frames:
            found += d.update([f])
    found = [f for f in found if f.rule == "node_silent"]  # (3 of the rack's 6: rack_silent)
    first = {}
    for f in found:
        first.setdefault(f.node, f.ts)
    assert set(first) == {"dies", "x", "y"}      # no healthy node
    assert d.now == 1000 + 2.0 * 149            # the clock was never moved by them
    # The dead node is reported its limit (silent_min_s) after its last frame, as is each
    # skewed one after its last frame arrived: neither 2 h late nor never.
    assert first["dies"] == 1000 + 2.0 * 29 + 62
    assert 1000 + 2.0 * 22 + 60 < first["x"] <= 1000 + 2.0 * 22 + 64
    assert all(f.ts <= 1000 + 2.0 * 149 for f in found)


def test_a_first_batch_of_one_frame_years_ahead_does_not_blind_the_rule() -> None:
    d = NodeSilence()
    d.update([node(4084473600.0, [busy(60)], name="bogus")])   # 2099, as the codec accepts
    found = []
    for k in range(100):
        found += d.update(_fleet(k, (*HEALTHY, "dies") if k < 30 else HEALTHY))
    assert d.now == 1000 + 2.0 * 99
    assert "dies" in {f.node for f in found}
    assert not {f.node for f in found} & set(HEALTHY)


def test_a_node_whose_clock_is_behind_but_keeps_sending_is_not_silent() -> None:
    d = NodeSilence()
    found = []
    for k in range(200):
        frames = _fleet(k) + [node(1000 + 2.0 * k - 600, [busy(60)], name="late")]
        found += d.update(frames)
    assert found == []


def test_most_of_the_fleet_dying_at_once_does_not_stop_the_clock() -> None:
    names = tuple(f"n{i}" for i in range(10))
    d = NodeSilence()
    found = []
    for k in range(200):
        found += d.update(_fleet(k, names if k < 30 else names[:3]))
    silent = {f.node for f in found if f.rule == "node_silent"}
    assert silent == set(names[3:])
    assert d.now == 1000 + 2.0 * 199


def test_with_a_wall_clock_now_is_never_later_than_it() -> None:
    # A processor's own clock: two of three nodes 4 min ahead (under the intake's bound)
    # cannot move "now" past it, so no alert is stamped in the future.
    d = NodeSilence()
    found = []
    for k in range(100):
        wall = 1000 + 2.0 * k + 0.5
        frames = [node(1000 + 2.0 * k, [busy(60)], name="a")] + [
            node(1000 + 2.0 * k + 240, [busy(60)], name=n) for n in ("b", "c")]
        found += d.update(frames, wall=wall)
        assert d.now <= wall
    assert found == []


def test_a_node_behind_that_dies_is_said_behind_the_fleets_clock() -> None:
    d, book = NodeSilence(), AlertBook()
    for k in range(200):
        t = 1000 + 5.0 * k
        frames = [node(t, [busy(60)], name=n) for n in HEALTHY]
        if k < 40:
            frames.append(node(t - 900, [busy(60)], name="slow"))  # 900 s behind, then dies
        book.apply(book.observe(frames, d.update(frames)))
    alerts = {a.node: a for a in book.open}
    assert "its clock was 900 s behind the fleet's" in alerts["slow"].message
