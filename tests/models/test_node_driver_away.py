"""A node whose NVIDIA driver goes away (unloaded, reset, reloading) for a while: one
agent, one machine, whose frames list no GPU and say NVML is away (host_nvml_up 0). That
is no second agent under its name, and beyond a few frames it is an alert of its own."""

from __future__ import annotations

import dataclasses

from fleetwatch.frame import Frame, HostReading
from fleetwatch.models.node_silence import NodeSilence
from tests.models.helpers import busy, node


def agent_frame(ts: float, seq: int, gpus: int, nvml_up: bool = True, name: str = "n1",
                machine: str = "") -> Frame:
    f = node(ts, [busy(60)] * gpus, name=name)
    f = dataclasses.replace(f, seq=seq, host=HostReading({"host_nvml_up": float(nvml_up)}))
    if machine:
        f = dataclasses.replace(f, gpus=tuple(
            dataclasses.replace(g, uuid=f"GPU-{machine}-{g.index}") for g in f.gpus))
    return f


def reload(d: NodeSilence, away: int, seq0: int = 1_790_000_000_000) -> list:
    """8 GPUs, then ``away`` frames (5 s apart) with the driver away, then 8 GPUs again;
    one agent."""
    found, seq, t = [], seq0, 1000.0
    for k in range(30):
        down = 10 <= k < 10 + away
        found += d.update([agent_frame(t, seq, 0 if down else 8, nvml_up=not down)])
        seq, t = seq + 1, t + 5.0
    return found


def test_a_driver_reload_of_a_few_seconds_is_no_name_conflict() -> None:
    found = reload(NodeSilence(), away=6)  # 25 s: a retry or two of the agent
    assert [f.rule for f in found] == []


def test_a_driver_away_for_more_than_a_few_frames_is_an_alert_worded_as_such() -> None:
    found = reload(NodeSilence(), away=8)
    assert "node_name_conflict" not in {f.rule for f in found}
    away = [f for f in found if f.rule == "node_nvml_down"]
    assert len(away) == 2  # from 30 s away on, each frame
    first = away[0]
    assert (first.node, first.scope, first.gpu, first.severity) == ("n1", "node", None,
                                                                    "warning")
    assert first.ts == 1000.0 + 5.0 * (10 + 6)
    assert "NVML has not answered for 30 s (7 frames)" in first.message
    assert "8 GPUs" in first.message and "unwatched" in first.message
    assert "nvidia-smi" in first.action
    assert away[-1].evidence["away_s"] == 35.0


def test_a_gpu_less_clone_with_nvml_away_beside_a_gpu_agent_is_still_a_conflict() -> None:
    d = NodeSilence()
    found = []
    for k in range(6):
        t = 1000 + 5.0 * k
        found += d.update([agent_frame(t, 1_790_000_000_000 + k, 2, name="x"),
                           agent_frame(t + 1, 1_790_000_005_000 + k, 0, nvml_up=False,
                                       name="x")])
    assert "node_name_conflict" in {f.rule for f in found}


def test_two_gpu_agents_whose_seqs_do_not_follow_on_are_a_conflict() -> None:
    d = NodeSilence()
    found = []
    for k in range(6):
        t = 1000 + 5.0 * k
        found += d.update([agent_frame(t, 1_790_000_000_000 + k, 8, name="y"),
                           agent_frame(t + 1, 1_790_000_000_300 + k, 8, name="y",
                                       machine="b")])
    assert "node_name_conflict" in {f.rule for f in found}
