"""Two machines that report under one node name (a cloned image, a copied config): their
frames interleave in one node's series, and nothing else would say so."""

from __future__ import annotations

import dataclasses

from fleetwatch.frame import Frame
from fleetwatch.models.node_silence import NodeSilence
from tests.models.helpers import busy, node


def as_machine(f: Frame, machine: str) -> Frame:
    """The frame with the GPU UUIDs of another physical machine."""
    return dataclasses.replace(f, gpus=tuple(dataclasses.replace(g, uuid=f"GPU-{machine}-{g.index}")
                                             for g in f.gpus))


def test_two_agents_under_one_name_are_reported_with_both_gpu_sets() -> None:
    d = NodeSilence()
    found = []
    for k in range(10):
        found += d.update([node(1000 + 5.0 * k, [busy(60)] * 8, name="dup")])
        found += d.update([as_machine(node(1002 + 5.0 * k, [busy(60)] * 4, name="dup"), "b")])
    conflicts = [f for f in found if f.rule == "node_name_conflict"]
    assert conflicts and conflicts[0].ts <= 1010
    first = conflicts[0]
    assert (first.node, first.severity, first.scope) == ("dup", "warning", "node")
    assert first.message.startswith("2 agents report as dup, their frames interleaved: ")
    assert "8 GPUs (GPU-dup-0" in first.message and "4 GPUs (GPU-b-0" in first.message
    assert "node.node" in first.action


def test_a_gpu_replaced_once_or_a_node_rebuilt_is_no_conflict() -> None:
    d = NodeSilence()
    found = []
    for k in range(60):
        f = node(1000 + 5.0 * k, [busy(60)] * 8, name="n1")
        found += d.update([as_machine(f, "new") if k >= 20 else f])
    assert [f for f in found if f.rule == "node_name_conflict"] == []


def test_a_host_only_agent_beside_a_gpu_agent_under_one_name_is_a_conflict() -> None:
    d = NodeSilence()
    found = []
    for k in range(6):
        t = 1000 + 5.0 * k
        found += d.update([node(t, [busy(60)] * 2, name="x"), node(t + 1, [], name="x")])
    (last, *_) = [f for f in reversed(found) if f.rule == "node_name_conflict"]
    assert "no GPU" in last.message and "2 GPUs" in last.message
