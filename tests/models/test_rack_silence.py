"""A rack whose nodes go silent together (a PDU trip, a lost top-of-rack switch) is one
``rack_silent`` alert naming the rack and its silent nodes, raised as the first of them
passes its limit and resolved when they are back; nodes dying one by one, a single node,
or a minority of the rack are not a rack; a detector that does not read every partition,
and is not told which racks are its to judge (``share``: test_rack_shared.py), judges no
rack (it sees only some of a rack's nodes)."""

from __future__ import annotations

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.models.rack_silence import EVIDENCE_NODES, Heard, at_frames, racks_down
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node

C = DetectorsConfig()  # silent_min_s 60, window 20 s, half of the rack, two nodes or more


def heard(name: str, last: float, now: float, rack: str = "r1", limit: float = 60.0,
          waiting: bool = False) -> Heard:
    return Heard("c", rack, name, last, now - last, limit, waiting)


def test_three_of_four_nodes_cut_within_seconds_are_one_rack_alert() -> None:
    now = 1061.0
    nodes = [heard("n0", 1000.0, now), heard("n1", 1002.0, now), heard("n2", 1004.5, now),
             heard("n3", 1060.0, now)]  # n3 still sends
    [f] = racks_down(nodes, now, C)
    assert (f.rule, f.scope, f.rack, f.node, f.severity) == ("rack_silent", "rack", "r1", "",
                                                             "critical")
    assert f.ts == now and f.since == 1060.0  # as n0 passed its limit
    assert f.evidence["silent_nodes"] == 3 and f.evidence["known_nodes"] == 4
    assert f.evidence["last_frames_span_s"] == 4.5
    assert {k: v for k, v in f.evidence.items() if k.startswith("last_frame_ts.")} == {
        "last_frame_ts.n0": 1000.0, "last_frame_ts.n1": 1002.0, "last_frame_ts.n2": 1004.5}
    assert "Rack r1" in f.message and "n0, n1, n2" in f.message and "3 of its 4" in f.message
    assert "PDU" in f.action and "top-of-rack switch" in f.action


def test_a_hall_named_one_rack_gives_the_first_nodes_times_and_counts_the_rest() -> None:
    """One rack name for every node of a hall (no rack configured): a power cut there is
    one alert of 1,000 nodes, whose evidence must not carry 1,000 fields to every store,
    Alertmanager and webhook."""
    now = 1100.0
    nodes = [heard(f"n{i:04d}", 1000.0 + i / 100, now) for i in range(1000)]
    [f] = racks_down(nodes, now, C)
    times = {k: v for k, v in f.evidence.items() if k.startswith("last_frame_ts.")}
    assert len(times) == EVIDENCE_NODES and "last_frame_ts.n0000" in times
    assert f.evidence["last_frame_ts_left_out"] == 1000 - EVIDENCE_NODES
    assert f.evidence["silent_nodes"] == 1000 and "1000 of its 1000" in f.message
    [few] = racks_down(nodes[:EVIDENCE_NODES], now, C)
    assert "last_frame_ts_left_out" not in few.evidence


def test_nodes_dying_one_by_one_are_no_rack() -> None:
    """Three of four nodes silent, but ten minutes apart: each is its own node_silent."""
    now = 3000.0
    nodes = [heard("n0", 1000.0, now), heard("n1", 1600.0, now), heard("n2", 2200.0, now),
             heard("n3", 2999.0, now)]
    assert racks_down(nodes, now, C) == []


def test_one_node_or_a_minority_of_the_rack_is_no_rack() -> None:
    now = 1061.0
    assert racks_down([heard("n0", 1000.0, now), heard("n1", 1060.0, now)], now, C) == []
    eight = [heard(f"n{i}", 1000.0 + i if i < 3 else 1060.0, now) for i in range(8)]
    assert racks_down(eight, now, C) == []  # 3 of 8
    eight[3] = heard("n3", 1003.0, now)
    assert len(racks_down(eight, now, C)) == 1  # 4 of 8: half


def test_not_before_one_of_them_passes_its_limit_and_late_senders_never_count() -> None:
    # Two nodes 50 s quiet (limit 60): not yet. Two others 25 s late: never counted.
    now = 1050.0
    nodes = [heard("n0", 1000.0, now), heard("n1", 1001.0, now), heard("n2", 1025.0, now),
             heard("n3", 1025.0, now)]
    assert racks_down(nodes, now, C) == []
    now = 1061.0
    nodes = [heard("n0", 1000.0, now), heard("n1", 1001.0, now), heard("n2", 1050.0, now),
             heard("n3", 1050.0, now)]
    [f] = racks_down(nodes, now, C)
    assert f.evidence["silent_nodes"] == 2  # n2, n3 (11 s quiet) are not silent


def test_a_node_taken_over_and_not_heard_yet_is_known_not_silent() -> None:
    now = 1061.0
    nodes = [heard("n0", 1000.0, now), heard("n1", 1001.0, now, waiting=True),
             heard("n2", 1060.0, now)]
    assert racks_down(nodes, now, C) == []


def test_racks_are_judged_apart() -> None:
    now = 1061.0
    nodes = [heard("a0", 1000.0, now, rack="ra"), heard("a1", 1001.0, now, rack="ra"),
             heard("b0", 1000.0, now, rack="rb"), heard("b1", 1060.0, now, rack="rb")]
    assert [f.rack for f in racks_down(nodes, now, C)] == ["ra"]


def _run(d: NodeSilence, book: AlertBook, down: set[str], start: float, end: float,
         names: tuple[str, ...], racks: dict[str, str]) -> list[tuple[float, str, str]]:
    """Frames every 5 s of ``names`` but ``down``; the alert changes (time, rule, state)."""
    out = []
    t = start
    while t < end:
        frames = [node(t, [busy(60)], name=n, rack=racks[n]) for n in names if n not in down]
        changes = book.observe(frames, d.update(frames, wall=t + 0.1))
        book.apply(changes)
        out += [(a.updated_ts, a.rule, a.state) for a in changes]
        t += 5.0
    return out


def test_a_pdu_trip_in_the_detector_fires_with_its_first_node_and_resolves_when_back() -> None:
    names = ("a0", "a1", "a2", "a3", "b0", "b1")
    racks = {n: "ra" if n.startswith("a") else "rb" for n in names}
    d = NodeSilence()
    book = AlertBook(requirements=d.rules, keep_firing_s=300.0)
    _run(d, book, set(), 1000.0, 1300.0, names, racks)
    changes = _run(d, book, {"a0", "a1", "a2"}, 1300.0, 1500.0, names, racks)
    rack = [(ts, s) for ts, rule, s in changes if rule == "rack_silent"]
    nodes = sorted(ts for ts, rule, s in changes if rule == "node_silent" and s == "firing")
    # One rack alert, firing with the nodes' own, kept open while a3 and rb still send
    # (written again each refresh, never resolved meanwhile).
    assert {s for _, s in rack} == {"firing"} and rack[0][0] == nodes[0]
    [open_rack] = [a for a in book.open if a.rule == "rack_silent"]
    assert open_rack.rack == "ra" and open_rack.evidence["silent_nodes"] == 3
    assert len({a.id for a in book.open if a.rule == "rack_silent"}) == 1
    back = _run(d, book, {"a0"}, 1500.0, 1520.0, names, racks)
    assert [(ts, s) for ts, rule, s in back if rule == "rack_silent"] == [(1500.0, "resolved")]
    assert not [a for a in book.open if a.rule == "rack_silent"]


def test_a_processor_that_reads_some_partitions_judges_no_rack() -> None:
    names = ("a0", "a1", "a2", "a3")
    racks = dict.fromkeys(names, "ra")
    d = NodeSilence()
    d.whole(False)
    book = AlertBook(requirements=d.rules)
    _run(d, book, set(), 1000.0, 1300.0, names, racks)
    changes = _run(d, book, {"a0", "a1", "a2"}, 1300.0, 1500.0, names, racks)
    assert {rule for _, rule, _ in changes} == {"node_silent"}


def test_a_rack_finding_is_repeated_at_its_live_nodes_frames() -> None:
    """The lifecycle judges a rack alert at each frame of its rack: without its finding at
    that time, the rack would read as back."""
    now = 1061.0
    [f] = racks_down([heard("n0", 1000.0, now), heard("n1", 1001.0, now)], now, C)
    frames = [node(1059.0, [busy(60)], name="n2"), node(1061.0, [busy(60)], name="n2"),
              node(1060.0, [busy(60)], name="x", rack="other")]
    assert sorted(g.ts for g in at_frames([f], frames)) == [1059.0, 1061.0]


def test_a_rack_alert_no_longer_judged_resolves_at_its_live_nodes_next_frame() -> None:
    """A second processor joins while a rack alert fires: this detector no longer reads
    every partition and is told no rack to judge (``share``), and the rack's live node's
    next frame resolves the alert (its silent nodes then page on their own), rather than
    holding a page it cannot judge. (In a processor, the rack's judge keeps it and the other
    member lets it go: test_rack_judge_handover.py.)"""
    names = ("a0", "a1", "a2", "a3")
    racks = dict.fromkeys(names, "ra")
    d = NodeSilence()
    book = AlertBook(requirements=d.rules)
    _run(d, book, set(), 1000.0, 1300.0, names, racks)
    _run(d, book, {"a0", "a1", "a2"}, 1300.0, 1400.0, names, racks)
    assert [a.rule for a in book.open if a.rule == "rack_silent"] == ["rack_silent"]
    d.whole(False)
    changes = _run(d, book, {"a0", "a1", "a2"}, 1400.0, 1405.0, names, racks)
    assert [(a, s) for _, a, s in changes if a == "rack_silent"] == [("rack_silent",
                                                                       "resolved")]
    assert sorted(a.node for a in book.open) == ["a0", "a1", "a2"]


def test_agents_reporting_every_minute_are_cut_anywhere_within_that_minute() -> None:
    """A PDU trip under agents that report every 60 s: their last frames spread over the
    minute before it. The window is two of the rack's usual intervals where longer than
    rack_silent_window_s; nodes ten minutes apart are still no rack."""
    now = 1361.0
    nodes = [Heard("c", "r1", f"n{i}", 1000.0 + 25.0 * i, now - 1000.0 - 25.0 * i, 360.0,
                   interval=60.0) for i in range(3)]
    nodes.append(Heard("c", "r1", "n3", 1355.0, 6.0, 360.0, interval=60.0))
    [f] = racks_down(nodes, now, C)
    assert f.evidence["silent_nodes"] == 3 and f.evidence["last_frames_span_s"] == 50.0
    apart = [Heard("c", "r1", f"n{i}", 1000.0 + 600.0 * i, 2500.0 - 1000.0 - 600.0 * i,
                   360.0, interval=60.0) for i in range(3)]
    assert racks_down(apart, 2500.0, C) == []
