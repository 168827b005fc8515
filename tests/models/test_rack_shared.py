"""Racks judged with several processors in a consumer group: each rack by one member, its
judge, on its own nodes of the rack and the other members' last frame times as the shared
store has them (``NodeSilence.share``, ``rack_silence.SharedRacks``). A rack whose nodes
are spread over two members is one ``rack_silent``, raised by its judge alone, resolved by
it when the nodes are back, even where the judge reads none of the rack's frames; a store
that cannot be read holds the last finding."""

from __future__ import annotations

from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.models.rack_silence import Remote, SharedRacks, racks_down
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node
from tests.models.test_rack_silence import C, heard

RACKS = {"a0": "ra", "a1": "ra", "a2": "ra", "a3": "ra", "b0": "rb", "b1": "rb"}


class Member:
    """One processor's silence detector and alert book, reading ``nodes``."""

    def __init__(self, nodes: tuple[str, ...], judged: set[str]) -> None:
        self.nodes, self.judged = nodes, judged
        self.d = NodeSilence()
        self.d.whole(False)
        self.book = AlertBook(requirements=self.d.rules)
        self.changes: list[tuple[float, str, str, str]] = []

    def judges(self, cluster: str, rack: str) -> bool:
        return rack in self.judged


def _run(members: list[Member], store: dict[str, float], down: set[str], start: float,
         end: float, store_away: bool = False) -> None:
    """Frames every 5 s of every node but ``down``, each stored (``store``: the last frame
    time of each node, as every member writes it) before its reader judges it."""
    t = start
    while t < end:
        for n in RACKS:
            if n not in down:
                store[n] = t
        for m in members:
            frames = [node(t, [busy(60)], name=n, rack=RACKS[n])
                      for n in m.nodes if n not in down]
            remote = None if store_away else [Remote("c", RACKS[n], n, ts)
                                              for n, ts in store.items()]
            m.d.share(m.judges, remote)
            findings = m.d.update(frames, wall=t + 0.1) if frames else m.d.tick(t + 0.1)
            changes = m.book.observe(frames, findings)
            m.book.apply(changes)
            m.changes += [(a.updated_ts, a.rule, a.node or a.rack, a.state) for a in changes]
        t += 5.0


def _rack(m: Member) -> list[tuple[float, str]]:
    return [(ts, s) for ts, rule, _, s in m.changes if rule == "rack_silent"]


def test_a_rack_spread_over_two_members_is_one_alert_from_its_judge() -> None:
    judge = Member(("a0", "a1", "b0"), {"ra"})
    other = Member(("a2", "a3", "b1"), {"rb"})
    store: dict[str, float] = {}
    _run([judge, other], store, set(), 1000.0, 1300.0)
    for m in (judge, other):
        m.changes.clear()
    _run([judge, other], store, {"a0", "a2", "a3"}, 1300.0, 1500.0)
    assert _rack(other) == []
    rack = _rack(judge)
    assert {s for _, s in rack} == {"firing"}
    [alert] = [a for a in judge.book.open if a.rule == "rack_silent"]
    assert alert.rack == "ra" and alert.evidence["silent_nodes"] == 3
    assert alert.evidence["known_nodes"] == 4
    assert {k for k in alert.evidence if k.startswith("last_frame_ts.")} == {
        "last_frame_ts.a0", "last_frame_ts.a2", "last_frame_ts.a3"}
    # Raised as its first node passed its limit: with the node alerts, not after them.
    first_node = min(ts for m in (judge, other) for ts, rule, _, s in m.changes
                     if rule == "node_silent" and s == "firing")
    assert rack[0][0] <= first_node + 5.0
    _run([judge, other], store, set(), 1500.0, 1520.0)
    assert _rack(judge)[-1] == (1500.0, "resolved")
    assert not [a for a in judge.book.open if a.rule == "rack_silent"]
    assert _rack(other) == []


def test_a_judge_reading_none_of_the_rack_resolves_it_when_its_nodes_are_back() -> None:
    """Every node of ra is the other member's: the judge sees none of its frames, so its
    alert is resolved by a finding that says the rack is back, not by a frame."""
    judge = Member(("b0", "b1"), {"ra"})
    other = Member(("a0", "a1", "a2", "a3"), {"rb"})
    store: dict[str, float] = {}
    _run([judge, other], store, set(), 1000.0, 1300.0)
    _run([judge, other], store, {"a0", "a1", "a2"}, 1300.0, 1500.0)
    assert [a.rack for a in judge.book.open if a.rule == "rack_silent"] == ["ra"]
    assert _rack(other) == []
    _run([judge, other], store, set(), 1500.0, 1520.0)
    assert _rack(judge)[-1] == (1500.0, "resolved")
    [resolved] = [a for a in judge.changes if a[1] == "rack_silent" and a[3] == "resolved"]
    assert resolved[2] == "ra"


def test_a_store_that_cannot_be_read_holds_the_rack_down_and_raises_none() -> None:
    judge = Member(("b0", "b1"), {"ra"})
    other = Member(("a0", "a1", "a2", "a3"), {"rb"})
    store: dict[str, float] = {}
    _run([judge, other], store, set(), 1000.0, 1300.0)
    _run([judge, other], store, {"a0", "a1", "a2"}, 1300.0, 1500.0)
    # The store away while the nodes come back: the rack alert stays open (no read says
    # they are back), and is resolved once a read says so.
    _run([judge, other], store, set(), 1500.0, 1600.0, store_away=True)
    assert [a.rack for a in judge.book.open if a.rule == "rack_silent"] == ["ra"]
    _run([judge, other], store, set(), 1600.0, 1610.0)
    assert not [a for a in judge.book.open if a.rule == "rack_silent"]
    # A store away before any rack is down raises none, however old its last read gets.
    fresh = Member(("b0", "b1"), {"ra"})
    _run([fresh, other], {}, set(), 2000.0, 2300.0)
    _run([fresh, other], {}, set(), 2300.0, 2600.0, store_away=True)
    assert _rack(fresh) == []


def test_shared_racks_hold_resolve_and_hand_over() -> None:
    now = 1061.0
    [f] = racks_down([heard("n0", 1000.0, now), heard("n1", 1001.0, now)], now, C)
    shared = SharedRacks()
    assert shared.judge([f], lambda c, r: True, now) == [f]
    [held] = shared.judge(None, lambda c, r: True, now + 5.0)  # the store away: held
    assert held.ts == now + 5.0 and held.rule == "rack_silent" and not held.resolves
    [back] = shared.judge([], lambda c, r: True, now + 10.0)
    assert back.resolves and (back.rack, back.scope, back.ts) == ("r1", "rack", now + 10.0)
    assert shared.judge([], lambda c, r: True, now + 15.0) == []  # once
    # A rack taken over with its open alert is resolved once found up; one handed to
    # another judge (a rebalance) is let go without a word: its alert is the new judge's.
    shared.adopt("c", "r2")
    shared.adopt("c", "r3")
    [back] = shared.judge([], lambda c, r: r == "r2", now + 20.0)
    assert back.rack == "r2" and back.resolves
    assert shared.down == {}


def test_a_live_node_of_another_member_read_a_little_late_is_not_silent() -> None:
    """The store is read every few seconds: a live node's stored last frame may be that
    old. It is far from half its limit, the least a node must be quiet to count: one node
    of the judge's dying is its own page, not a rack with the other member's live ones."""
    judge = Member(("a0", "a1"), {"ra"})
    other = Member(("a2", "a3"), set())
    store: dict[str, float] = {}
    _run([judge, other], store, set(), 1000.0, 1300.0)
    for t in range(1300, 1500, 5):
        late = [Remote("c", RACKS[n], n, t - 10.0) for n in ("a2", "a3", "b0", "b1")]
        judge.d.share(judge.judges, late)
        frames = [node(t, [busy(60)], name="a1", rack="ra")]
        judge.book.apply(judge.book.observe(frames, judge.d.update(frames, wall=t + 0.1)))
    assert [(a.rule, a.node) for a in judge.book.open] == [("node_silent", "a0")]


def test_a_rack_found_by_a_lone_member_is_resolved_by_it_once_a_second_joins() -> None:
    """A rack alert fires while one member reads every partition; a second joins and takes
    all of the rack's nodes, this member still the rack's judge: it resolves the alert
    when the store says the nodes are back, though it reads none of their frames."""
    judge = Member(("a0", "a1", "a2", "a3", "b0", "b1"), {"ra"})
    judge.d.whole(True)
    store: dict[str, float] = {}
    _run([judge], store, set(), 1000.0, 1300.0)
    _run([judge], store, {"a0", "a1", "a2"}, 1300.0, 1400.0)
    assert [a.rack for a in judge.book.open if a.rule == "rack_silent"] == ["ra"]
    judge.d.whole(False)
    judge.d.drop({"a0", "a1", "a2", "a3"})
    judge.nodes = ("b0", "b1")
    other = Member(("a0", "a1", "a2", "a3"), {"rb"})
    _run([judge, other], store, set(), 1400.0, 1420.0)
    assert not [a for a in judge.book.open if a.rule == "rack_silent"]
    assert _rack(judge)[-1] == (1400.0, "resolved")


def test_a_judge_left_with_no_node_at_all_still_resolves_its_rack() -> None:
    """As above, but the second member takes every node of the fleet: the judge gets no
    frame at all (its partitions hold no node; a small fleet), so only its ticks judge.
    Before, a detector without a node of its own judged nothing on a tick: the rack alert
    stayed open for good (and Alertmanager kept it active, muting the rack's next
    node_silent by the shipped inhibit rule)."""
    judge = Member(tuple(RACKS), {"ra"})
    judge.d.whole(True)
    store: dict[str, float] = {}
    _run([judge], store, set(), 1000.0, 1300.0)
    _run([judge], store, {"a0", "a1", "a2"}, 1300.0, 1400.0)
    assert [a.rack for a in judge.book.open if a.rule == "rack_silent"] == ["ra"]
    judge.d.whole(False)
    judge.d.drop(set(RACKS))
    judge.nodes = ()
    other = Member(tuple(RACKS), {"rb"})
    _run([judge, other], store, set(), 1400.0, 1500.0)
    assert not [a for a in judge.book.open if a.rule == "rack_silent"]
    assert _rack(judge)[-1][1] == "resolved"
    assert _rack(other) == []


def test_a_judge_that_never_had_a_frame_resolves_the_rack_alert_it_took_over() -> None:
    """The member that joined with the rack's partition and no node: it takes the open
    alert over (``adopt``: its cluster is the alert's), judges on its ticks from the store,
    and resolves it when the nodes are back."""
    from fleetwatch.pipeline.alerts import AlertBook as Book
    from fleetwatch.pipeline.store.base import Alert

    open_rack = Alert("rack_silent/c//rack:ra/1300000", "rack_silent", "critical", "c", "ra",
                      "", "rack:ra", "firing", 1300.0, 1300.0, 3.0, "Rack ra: 3 of its 4",
                      fired_ts=1300.0)
    judge = Member((), {"ra"})
    judge.book = Book(requirements=judge.d.rules)
    judge.book.load([open_rack], 1400.0)
    judge.d.adopt([open_rack])
    other = Member(tuple(RACKS), {"rb"})
    store = {n: 1290.0 for n in RACKS}
    _run([judge, other], store, {"a0", "a1", "a2"}, 1400.0, 1500.0)
    assert [a.rack for a in judge.book.open if a.rule == "rack_silent"] == ["ra"]
    _run([judge, other], store, set(), 1500.0, 1560.0)
    assert not [a for a in judge.book.open if a.rule == "rack_silent"]
    assert _rack(judge)[-1][1] == "resolved"


def _small_fleet(settled: bool, window: float | None = None) -> list[str]:
    """The judge reads b0, b1 (rack rb); the other member only ra's four nodes, three of
    which stop together: every frame of the other member but a3's stops. a3 stops too a
    little later, so the other member's newest frame stops moving altogether."""
    judge = Member(("b0", "b1"), {"ra"})
    store: dict[str, float] = {}
    for t in range(1000, 1400, 5):
        for n in ("a0", "a1", "a2", "a3"):
            if t < 1200 or (n == "a3" and t < 1210):
                store[n] = float(t)
        remote = [Remote("c", "ra", n, ts, settled) for n, ts in store.items()]
        judge.d.share(judge.judges, remote, (), None if window is None else t + window)
        frames = [node(t, [busy(60)], name=n, rack="rb") for n in judge.nodes]
        judge.book.apply(judge.book.observe(frames, judge.d.update(frames, wall=t + 0.1)))
    return [a.rack for a in judge.book.open if a.rule == "rack_silent"]


def test_a_rack_that_is_all_the_other_member_reads_is_judged_once_its_partition_is_settled(
        ) -> None:
    """The other members' nodes are judged at the newest frame of theirs the store gave (a
    member catching up a backlog makes no live rack silent). Where the rack's nodes are all
    the other member reads, that reference stops with them: the rack is judged on the
    judge's own time once the group has stored their partition to its end (its committed
    offset: nothing of it waits unstored)."""
    assert _small_fleet(settled=False) == []  # the reference stopped with them
    assert _small_fleet(settled=True) == ["ra"]
    assert _small_fleet(settled=True, window=-120.0) == ["ra"]  # a short read's window
    # The judge's stream far behind the read's window (a backlog or a replay stamped in the
    # past): a frame stamped before it and stored since would not be seen: not settled.
    assert _small_fleet(settled=True, window=1800.0) == []
