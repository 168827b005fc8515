"""One processor for several clusters: node names (node001) repeat in every cluster, and a
node is a (cluster, node), never a name alone: silence, name conflicts, a batch's waves,
the temperature rule's hysteresis."""

from __future__ import annotations

import dataclasses

from fleetwatch.frame import Frame
from fleetwatch.models.batch import columns
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.models.rules import GpuTemperatureLimit
from tests.models.helpers import busy, node
from tests.models.test_node_name_conflict import as_machine


def at(cluster: str, f: Frame) -> Frame:
    return dataclasses.replace(f, cluster=cluster)


def silent(found: list) -> list[tuple[str, str]]:
    return sorted({(f.cluster, f.node) for f in found if f.rule == "node_silent"})


def test_a_node_silent_in_one_cluster_is_reported_while_its_name_reports_in_another() -> None:
    d = NodeSilence()
    found = []
    for k in range(60):  # 5 minutes at 5 s; c-eu's node001 dies after one
        t = 1000 + 5.0 * k
        frames = [at("c-east", node(t, [busy(60)] * 2, name="node001")),
                  at("c-west", as_machine(node(t, [busy(60)] * 2, name="node001"), "w"))]
        if k < 12:
            frames.append(at("c-eu", as_machine(node(t, [busy(60)] * 2, name="node001"), "e")))
        found += d.update(frames)
    assert silent(found) == [("c-eu", "node001")]
    last = [f for f in found if f.rule == "node_silent"][-1]
    assert last.value > 200  # still counting: the other clusters' node001 do not clear it


def test_same_named_nodes_of_two_clusters_are_no_name_conflict() -> None:
    d = NodeSilence()
    found = []
    for k in range(10):
        t = 1000 + 5.0 * k
        found += d.update([at("c-west", node(t, [busy(60)] * 4, name="node001"))])
        found += d.update([at("c-south", as_machine(node(t + 1, [busy(60)] * 4,
                                                         name="node001"), "s"))])
    assert [f for f in found if f.rule == "node_name_conflict"] == []


def test_two_machines_under_one_name_within_one_cluster_are_still_a_conflict() -> None:
    d = NodeSilence()
    found = []
    for k in range(10):
        t = 1000 + 5.0 * k
        found += d.update([at("c-west", node(t, [busy(60)] * 4, name="node001")),
                           at("c-east", as_machine(node(t, [busy(60)] * 4,
                                                        name="node001"), "x"))])
        found += d.update([at("c-west", as_machine(node(t + 1, [busy(60)] * 4,
                                                        name="node001"), "b"))])
    conflicts = {(f.cluster, f.node) for f in found if f.rule == "node_name_conflict"}
    assert conflicts == {("c-west", "node001")}


def test_expected_nodes_and_partitions_behind_are_per_cluster() -> None:
    d = NodeSilence()
    d.update([at("c-east", node(1000, [busy(60)], name="node001"))])
    # Taken over: c-eu's node001 last sent at 990, and has sent nothing since.
    d.expect([("c-eu", "r1", "node001", 990.0), ("c-east", "r1", "node001", 1000.0)])
    found = []
    for k in range(1, 40):
        found += d.update([at("c-east", node(1000 + 5.0 * k, [busy(60)], name="node001")),
                           at("c-eu", node(1000 + 5.0 * k, [busy(60)], name="other"))])
    assert silent(found) == [("c-eu", "node001")]
    d.behind({("c-eu", "node001"): ("t", 0)})
    d.drop([("c-eu", "node001")])
    assert silent(d.update([at("c-east", node(1200, [busy(60)], name="node001"))])) == []


def test_same_named_nodes_of_two_clusters_share_a_wave_of_the_batch() -> None:
    frames = [at(c, node(1000.0, [busy(60)], name="node001")) for c in ("c-east", "c-west")]
    assert [w.tolist() for w in columns(frames).waves] == [[0, 1]]


def test_a_hot_gpu_in_one_cluster_keeps_no_namesake_hot_in_another() -> None:
    d = GpuTemperatureLimit(limit_c=85.0, hysteresis_c=3.0)
    assert d.update([at("c-east", node(1000, [busy(90)], name="node001"))])
    # c-west's node001 GPU 0 at 83 °C: under the limit, never hot: no hysteresis of c-east's.
    assert d.update([at("c-west", node(1005, [busy(83)], name="node001"))]) == []


def test_a_node_taken_over_long_silent_is_silent_since_its_last_frame_and_limit() -> None:
    d = NodeSilence()
    d.update([at("c-east", node(15_000, [busy(60)], name="node001"))])
    d.expect([("c-east", "r1", "node-253", 600.0)])  # last sent 4 h before
    found = []
    for k in range(1, 40):
        found += d.update([at("c-east", node(15_000 + 5.0 * k, [busy(60)], name="node001"))])
    first = next(f for f in found if f.rule == "node_silent")
    assert first.node == "node-253" and first.ts > 15_000
    assert first.since == 600.0 + 60.0  # silent_min_s past its last frame, not detection
    assert first.value > 14_000 and "last frame" in first.message
    assert "interval_s" not in first.evidence
