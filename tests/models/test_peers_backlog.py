"""Peers beyond the node in a backlog read unevenly: a fleet of 2-GPU nodes (each node its
own job, so each GPU is judged against its rack's GPUs at its power) starts a job
everywhere at once after maintenance, its GPUs warming from ~48 °C idle to ~66 °C at
400 W over minutes. A processor that reads the backlog of that morning gets its
partitions unevenly: a batch holds minutes of some nodes beside minutes of others read
further behind. A GPU must be compared with its peers' frames of its own time, not with
their warm-up minutes (an admin's fleet: 56 critical `gpu_hot_vs_peers` pages, none
live)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from fleetwatch.frame import Frame
from fleetwatch.models.peers import ThermalPeers
from tests.models import test_peers_rack as rack
from tests.models.helpers import busy, node

HOT = {"gpu_hot_vs_peers", "gpu_hot_vs_peers_critical"}
STEP = 5.0
BUSY_S = 1200.0            # a job on every node, then maintenance: all idle
START_S = 2400.0           # the job starts again on every node at once
END_S = 3600.0
NODES = [f"n{i}" for i in range(8)]
# n0's partition read further than the others' (each its own: 90 s apart)
AHEAD = {n: 0.0 if n == "n0" else 240.0 for n in NODES}
APART = {n: 90.0 * i for i, n in enumerate(NODES)}
SINK_TAU_S = 120.0         # heat sinks, coolant and air of a fleet warming together


def power_at(t: float) -> float:
    return 400.0 if t < BUSY_S or t >= START_S else 60.0


def temp_at(t: float, k: int, hot_c: float = 0.0) -> float:
    """A GPU's heat sink: 44 °C + 0.055 °C/W of the power, reached through SINK_TAU_S;
    each GPU a fraction of a degree from the others."""
    idle, full = 44.0 + 0.055 * 60.0, 44.0 + 0.055 * 400.0
    if t < BUSY_S:
        at = full
    elif t < START_S:
        at = idle + (full - idle) * math.exp(-(t - BUSY_S) / SINK_TAU_S)
    else:
        at = full - (full - idle) * math.exp(-(t - START_S) / SINK_TAU_S)
    return at + 0.3 * (k % 3 - 1) + hot_c


def frame(name: str, t: float, hot_c: float = 0.0) -> Frame:
    i = NODES.index(name)
    return node(t, [busy(round(temp_at(t, 2 * i + j, hot_c if j == 0 else 0.0)), power_at(t))
                    for j in range(2)], name=name, rack="r1", job=f"job-{name}")


def times(start: float, end: float) -> list[float]:
    return [start + STEP * k for k in range(int(round((end - start) / STEP)))]


def live(d: ThermalPeers) -> list:
    """The live group: one batch per scrape, every node's frame of that time."""
    out = []
    for t in times(0.0, END_S):
        out += d.update([frame(n, t) for n in NODES])
    return out


def backlog(d: ThermalPeers, span_s: float, behind: dict[str, float], read_from: float = 0.0,
            hot: str = "", hot_c: float = 0.0, hot_from: float = 0.0) -> list:
    """The frames up to ``read_from`` read live (``live``), then a backlog read unevenly:
    each batch holds ``span_s`` of every node, those of ``behind`` that many seconds
    earlier (their partitions read that far behind the others'); ``hot``'s GPU 0 runs
    ``hot_c`` over its peers from ``hot_from``."""
    out = []
    for t in times(0.0, read_from):
        out += d.update([frame(n, t) for n in NODES])
    t = read_from
    while t < END_S + max(behind.values()):
        batch = []
        for s in times(t, t + span_s):
            for n in NODES:
                ts = s - behind.get(n, 0.0)
                if read_from <= ts < END_S:
                    batch.append(frame(n, ts, hot_c if n == hot and ts >= hot_from else 0.0))
        out += d.update(batch)
        t += span_s
    return out


def hot(found: list) -> list:
    return [f for f in found if f.rule in HOT]


def test_the_live_group_pages_nothing_on_a_fleet_wide_job_start() -> None:
    assert hot(live(ThermalPeers())) == []


@pytest.mark.parametrize(("span_s", "behind", "read_from"), [
    (600.0, AHEAD, 0.0), (60.0, AHEAD, BUSY_S), (120.0, APART, 0.0), (60.0, APART, BUSY_S)])
def test_a_backlog_read_unevenly_compares_each_gpu_with_its_peers_of_its_own_time(
        span_s: float, behind: dict[str, float], read_from: float) -> None:
    # Before, wave k put the k-th frame of each node of the batch together: n0, read
    # ahead, was judged against the others' warm-up minutes, some 10 °C cooler (70
    # findings, "9 °C above its 15 peers in its rack"; each node's partition at its own
    # lag, 138).
    found = hot(backlog(ThermalPeers(), span_s, behind, read_from))
    assert found == [], [(f.node, f.gpu, f.ts, f.evidence) for f in found[:3]]


@pytest.mark.parametrize(("span_s", "behind"), [
    (600.0, AHEAD), (300.0, {n: 0.0 if n == "n0" else 120.0 for n in NODES})])
def test_a_backlog_with_partitions_minutes_apart_still_pages_a_failing_heat_path(
        span_s: float, behind: dict[str, float]) -> None:
    # n0's partition is read ahead of the others: the peers of its time are in the same
    # batch, later frames of the others than their k-th: judged against them.
    fault_s = START_S + 600.0
    found = hot(backlog(ThermalPeers(), span_s, behind, hot="n0", hot_c=14.0,
                        hot_from=fault_s))
    assert found and {(f.node, f.gpu) for f in found} == {("n0", 0)}
    assert min(f.ts for f in found) - fault_s <= 60.0


@pytest.mark.parametrize(("late_s", "peers"), [(4.0, 17), (8.0, 9)])
def test_a_peers_frame_five_seconds_or_more_from_the_gpus_own_is_no_peer(
        late_s: float, peers: int) -> None:
    # A wave spans as long as nodes' frames follow each other less than 5 s apart (a fleet
    # reporting every 15 s, each agent at its own phase): the small node's failing GPU 0
    # is judged against its GPU 1 and train-a's 8 GPUs (4 s from its frame), and
    # train-b's 8 only where they are as close (test_peers_rack's fleet).
    d = ThermalPeers()
    assert rack.small_hot(rack.feed(d, 1800)) == []
    t = 1800.0
    a, b, small = rack.frames(t, fault_c=12.0)
    batch = [small, dataclasses.replace(a, ts=t + 4.0), dataclasses.replace(b, ts=t + late_s)]
    found = rack.small_hot(d.update(batch))
    assert found and {f.gpu for f in found} == {0}
    assert {f.evidence["peers"] for f in found} == {peers}
