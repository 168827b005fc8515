"""A node that goes away for good (scaled down, re-imaged under a new name) is forgotten
after ``FORGET_S``: its ``node_silent`` alert resolves then, saying it was forgotten (not
that it is back), and the detector drops its state. (The r24 churn run: every node an
autoscaler removed stayed an open critical alert for ever, 430 after 42 minutes, its value
frozen at 7 days; per-node arrays grew with every name ever seen.)"""

from __future__ import annotations

from fleetwatch.models import Finding
from fleetwatch.models.node_silence import FORGET_S, NodeSilence
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node

STEP = 300.0


def run(until: float, gone_after: float) -> tuple[NodeSilence, AlertBook, list]:
    d = NodeSilence()
    book = AlertBook(requirements={"node_silent": ()}, keep_firing_s=300.0)
    changes_of_gone = []
    t = 1000.0
    while t < until:
        names = ("stays", "gone") if t < gone_after else ("stays",)
        frames = [node(t, [busy(60)], name=n) for n in names]
        changes = book.observe(frames, d.update(frames))
        book.apply(changes)
        changes_of_gone += [a for a in changes if a.node == "gone"]
        t += STEP
    return d, book, changes_of_gone


def test_a_node_gone_for_good_has_its_alert_resolved_as_forgotten() -> None:
    d, book, changes = run(1000.0 + FORGET_S + 2 * 86400.0, gone_after=4600.0)
    states = [a.state for a in changes]
    assert states[0] == "firing" and states[-1] == "resolved"
    end = changes[-1]
    assert FORGET_S <= end.resolved_ts - 4300.0 < FORGET_S + 2 * STEP
    assert "forgotten" in end.resolution and "not back" in end.resolution
    assert end.evidence["forgotten"] == 1.0
    assert book.open == []
    # Its state is dropped: only the node still reporting is held.
    assert [w[2] for w in d._where] == ["stays"] and list(d._index) == [("c", "stays")]


def test_a_forgotten_node_that_reports_again_is_judged_afresh() -> None:
    d, book, _ = run(1000.0 + FORGET_S + 3600.0, gone_after=4600.0)
    t = 1000.0 + FORGET_S + 3600.0
    frames = [node(t, [busy(60)], name=n) for n in ("stays", "gone")]
    assert d.update(frames) == []
    assert {w[2] for w in d._where} == {"stays", "gone"}


def test_a_resolving_finding_opens_no_alert_and_ends_an_open_one() -> None:
    book = AlertBook(requirements={"node_silent": ()})
    forget = Finding("node_silent", "c", "r1", "n1", None, 100.0, 7.0, "forgotten",
                     "critical", scope="node", resolves=True)
    assert book.observe([], [forget]) == []
    fire = Finding("node_silent", "c", "r1", "n1", None, 50.0, 70.0, "silent", "critical",
                   scope="node")
    book.apply(book.observe([], [fire]))
    (end,) = book.observe([], [forget])
    assert (end.state, end.resolved_ts, end.resolution) == ("resolved", 100.0, "forgotten")
    assert end.message == "silent"  # what it fired with stays


def test_a_rack_whose_every_node_is_forgotten_is_said_forgotten_once() -> None:
    d = NodeSilence()
    t, said = 1000.0, []
    while t < 1000.0 + FORGET_S + 3600.0:
        frames = [node(t, [busy(60)], name="stays")]
        if t < 4600.0:
            frames += [node(t, [busy(60)], name=n, rack="r9") for n in ("g1", "g2")]
            frames.append(node(t, [busy(60)], name="g3"))  # of r1, where "stays" is
        said += [f for f in d.update(frames) if f.resolves]
        t += STEP
    assert sorted((f.scope, f.node, f.rack) for f in said) == [
        ("node", "g1", "r9"), ("node", "g2", "r9"), ("node", "g3", "r1"),
        ("rack", "", "r9")]
    (rack,) = [f for f in said if f.scope == "rack"]
    assert rack.evidence["forgotten"] == 1.0 and "rack r9" in rack.message


def test_racks_are_not_said_forgotten_by_a_processor_that_sees_part_of_them() -> None:
    d = NodeSilence()
    d.whole(False)
    t, said = 1000.0, []
    while t < 1000.0 + FORGET_S + 3600.0:
        frames = [node(t, [busy(60)], name="stays")]
        if t < 4600.0:
            frames.append(node(t, [busy(60)], name="g1", rack="r9"))
        said += [f for f in d.update(frames) if f.resolves]
        t += STEP
    assert [(f.scope, f.node) for f in said] == [("node", "g1")]


def test_a_cluster_whose_last_node_is_forgotten_has_its_rack_and_room_said_forgotten() -> None:
    from fleetwatch.models.node_forget import empty_racks

    said = empty_racks({("c", "r1"): 5.0, ("d", "r1"): 5.0}, [("d", "r2")], {"c", "d"})
    assert sorted((f.cluster, f.rack, f.scope, f.resolves) for f in said) == [
        ("c", "*", "rack", True), ("c", "r1", "rack", True), ("d", "r1", "rack", True)]
    assert "the room" in [f for f in said if f.rack == "*"][0].message
    # Another cluster's racks are its own processors'.
    assert empty_racks({("e", "r1"): 5.0}, [], {"c"}) == []
