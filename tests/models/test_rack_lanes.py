"""A rack judge's view of the other members' nodes is per partition (``Remote.lane``): each
node is judged on the time its own partition's frames have reached in the store, so that a
member catching up a backlog more slowly than another makes none of its live nodes silent
(all members restarted after an outage: before, 6 of 25 live racks paged ``rack_silent``,
their slow member's nodes judged at the fast one's time). A node whose clock runs behind
and keeps sending is heard of as its stored frames move, as the judge's own nodes are,
including after the judge's restart; one that stops is still a rack down."""

from __future__ import annotations

from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.models.rack_silence import Remote
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node

# The judge reads a0, a1, c2, b0; member A's partition p1 holds a2, c0, c1, b1; member B's
# partition p2 holds a3, a4, a5, b2. Rack ra spans all three; rack rc's c0, c1 have clocks
# 400 s behind.
MINE = {"a0": "ra", "a1": "ra", "c2": "rc", "b0": "rb"}
LANES = {"a2": "p1", "c0": "p1", "c1": "p1", "b1": "p1",
         "a3": "p2", "a4": "p2", "a5": "p2", "b2": "p2"}
RACKS = {**MINE, "a2": "ra", "c0": "rc", "c1": "rc", "b1": "rb",
         "a3": "ra", "a4": "ra", "a5": "ra", "b2": "rb"}
BEHIND = {"c0": 400.0, "c1": 400.0}  # how far each node's clock runs behind


class Judge:
    def __init__(self) -> None:
        self.d = NodeSilence()
        self.d.whole(False)
        self.book = AlertBook(requirements=self.d.rules)
        self.fired: list[tuple[float, str]] = []

    def step(self, t: float, store: dict[str, float], down: set[str]) -> None:
        remote = [Remote("c", RACKS[n], n, ts, lane=LANES[n]) for n, ts in store.items()]
        self.d.share(lambda c, r: True, remote)
        frames = [node(t, [busy(60)], name=n, rack=r) for n, r in MINE.items() if n not in down]
        changes = self.book.observe(frames, self.d.update(frames, wall=t + 0.1))
        self.book.apply(changes)
        self.fired += [(a.updated_ts, a.rack) for a in changes
                       if a.rule == "rack_silent" and a.state == "firing"]

    def racks(self) -> list[str]:
        return sorted(a.rack for a in self.book.open if a.rule == "rack_silent")


def _run(judge: Judge, store: dict[str, float], start: float, end: float,
         stalled: tuple[str, ...] = (), down: set[str] = frozenset(),
         behind: dict[str, float] | None = None) -> None:
    """Every 5 s: each node of the other members stored at its own clock's time (``behind``
    the judge's by so much), but those of ``stalled`` partitions (their member still
    catching up: nothing new stored) and ``down`` nodes (sending nothing)."""
    t = start
    while t < end:
        for n, lane in LANES.items():
            if lane not in stalled and n not in down:
                store[n] = t - (behind or {}).get(n, 0.0)
        judge.step(t, store, set(down))
        t += 5.0


def test_a_member_catching_up_slower_than_another_makes_no_live_rack_silent() -> None:
    judge, store = Judge(), {}
    _run(judge, store, 1000.0, 1300.0)
    # Member B (p2) stores nothing new for 2 min while member A is caught up: B's nodes
    # are behind on its own partition's time, not silent on A's.
    _run(judge, store, 1300.0, 1420.0, stalled=("p2",))
    _run(judge, store, 1420.0, 1500.0)
    assert judge.fired == []


def test_a_rack_down_in_a_slow_members_partition_is_still_paged() -> None:
    judge, store = Judge(), {}
    _run(judge, store, 1000.0, 1300.0)
    # Three of ra's six stop; their partition moves on with b2.
    _run(judge, store, 1300.0, 1420.0, down={"a3", "a4", "a5"})
    assert judge.racks() == ["ra"]
    [alert] = [a for a in judge.book.open if a.rule == "rack_silent"]
    assert {k for k in alert.evidence if k.startswith("last_frame_ts.")} == {
        "last_frame_ts.a3", "last_frame_ts.a4", "last_frame_ts.a5"}
    assert alert.evidence["last_frame_ts.a3"] == 1295.0


def test_nodes_whose_clocks_run_behind_are_not_silent_while_they_send() -> None:
    judge, store = Judge(), {}
    _run(judge, store, 1000.0, 1400.0, behind=BEHIND)
    assert judge.fired == []
    # A restarted judge reads their old-looking frames for the first time: not silent either.
    fresh = Judge()
    _run(fresh, store, 1400.0, 1600.0, behind=BEHIND)
    assert fresh.fired == []
    # They stop: a rack down all the same.
    _run(fresh, store, 1600.0, 1750.0, down={"c0", "c1"}, behind=BEHIND)
    assert fresh.racks() == ["rc"]


def test_a_rack_down_when_its_judge_restarts_stays_down_while_its_nodes_are_read_anew(
        ) -> None:
    """The restarted judge reads the other members' nodes for the first time: those whose
    frames have not moved since wait a limit (their clocks may run behind), but a rack alert
    taken over is held on what their frames say meanwhile, neither resolved nor raised
    again (a second page)."""
    judge, store = Judge(), {}
    _run(judge, store, 1000.0, 1300.0)
    _run(judge, store, 1300.0, 1400.0, down={"c0", "c1"})
    assert judge.racks() == ["rc"]
    fresh = Judge()
    taken = [a for a in judge.book.open if a.rule == "rack_silent"]
    fresh.book.load(taken, 1500.0)
    fresh.d.adopt(taken)
    changes: list[tuple[str, str]] = []
    t = 1500.0
    while t < 1700.0:
        for n in LANES:
            if n not in {"c0", "c1"}:
                store[n] = t
        remote = [Remote("c", RACKS[n], n, ts, lane=LANES[n]) for n, ts in store.items()]
        fresh.d.share(lambda c, r: True, remote)
        frames = [node(t, [busy(60)], name=n, rack=r) for n, r in MINE.items()]
        found = fresh.book.observe(frames, fresh.d.update(frames, wall=t + 0.1))
        fresh.book.apply(found)
        changes += [(a.id, a.state) for a in found if a.rule == "rack_silent"]
        t += 5.0
    assert fresh.racks() == ["rc"]
    assert {state for _, state in changes} <= {"firing"}
    assert {i for i, _ in changes} <= {taken[0].id}  # the same alert: no second page
