"""What a replay's summary may claim of each rule: the share of samples it could judge,
given the data's shape (peers, racks, counters, XIDs), and that every rule needing more
than its metrics is placed (``replay_reach``)."""

from __future__ import annotations

import io
from pathlib import Path

from fleetwatch.recorded import frames, read_files
from fleetwatch.replay import replay
from tests.core.test_replay import HEADER, write


def fleet_csv(nodes: int, gpus: int, extra: str = "", racks: int = 1) -> str:
    rows = [f"{1_700_000_000 + 15 * t},n{n},{g},gpu_temp_c,{60 + g},r{n % racks}"
            for t in range(4) for n in range(nodes) for g in range(gpus)]
    return HEADER.strip() + ",rack\n" + "\n".join(rows) + "\n" + extra


def coverage(tmp_path: Path, text: str) -> object:
    from fleetwatch.config import DetectorsConfig
    from fleetwatch.wiring import detectors

    return replay([write(tmp_path / "f.csv", text)], detectors(DetectorsConfig()),
                  io.StringIO())


def test_one_gpu_judges_no_peer_or_rack_rule_and_no_absent_counter(tmp_path: Path) -> None:
    """NAB's series as one GPU: the peer and rack rules have nothing to compare it with, and
    the error-counter and XID rules nothing to read; the summary said 100% of each."""
    summary = coverage(tmp_path, fleet_csv(1, 1))
    for rule in ("gpu_hot_vs_peers", "gpu_hot_vs_peers_critical", "gpu_temp_sensor_low",
                 "node_cooling", "rack_cooling", "gpu_ecc_dbe", "gpu_nvlink_errors",
                 "gpu_pcie_replay", "gpu_retired_pages", "gpu_xid_critical", "gpu_lost"):
        assert summary.coverage[rule] == 0.0, rule
    assert summary.coverage["gpu_temp_high"] == 1.0 == summary.coverage["node_silent"]
    lines = summary.lines()
    assert ("  gpu_hot_vs_peers: not judged: no peers (it needs 3 or more other GPUs of its "
            "node reporting gpu_temp_c; the data has none)") in lines
    assert any(line.startswith("  rack_cooling: not judged: no peers (") for line in lines)
    assert ("  gpu_ecc_dbe: not judged: lacked gpu_ecc_dbe_volatile_total or "
            "gpu_ecc_dbe_aggregate_total") in lines
    assert not any("judged 100%" in line for line in lines
                   if line.split(":")[0].strip() in ("gpu_pcie_replay", "gpu_xid_info"))


def estimate(tmp_path: Path, text: str) -> object:
    """The coverage the data's shape allows (``REACH``), before any detector's own count:
    what a detector without ``coverage()`` is reported by."""
    from fleetwatch.config import DetectorsConfig
    from fleetwatch.replay_coverage import ReplaySummary, coverage
    from fleetwatch.wiring import detectors

    summary = ReplaySummary()
    coverage(frames(read_files([write(tmp_path / "f.csv", text)])),
              detectors(DetectorsConfig()), summary)
    return summary


def test_peer_rules_judge_a_node_with_enough_gpus(tmp_path: Path) -> None:
    three = estimate(tmp_path, fleet_csv(1, 3))        # two others: fewer than min_peers (3)
    assert three.coverage["gpu_hot_vs_peers"] == 0.0
    assert "the data has at most 2)" in three.unjudged["gpu_hot_vs_peers"]
    assert three.coverage["node_cooling"] == 1.0        # two or more GPUs of the node
    four = estimate(tmp_path, fleet_csv(1, 4))
    assert four.coverage["gpu_hot_vs_peers"] == 1.0 and four.coverage["rack_cooling"] == 0.0
    rack = estimate(tmp_path, fleet_csv(2, 4))          # 8 GPUs on 2 nodes of one rack
    assert rack.coverage["rack_cooling"] == 1.0
    apart = estimate(tmp_path, fleet_csv(4, 4, racks=2))  # 8 GPUs a rack, on 2 nodes
    assert apart.coverage["rack_cooling"] == 1.0
    alone = estimate(tmp_path, fleet_csv(2, 8, racks=2))  # 8 GPUs a rack, on 1 node
    assert alone.coverage["rack_cooling"] == 0.0
    # The rack detector counts what it judged itself: the replay reports its count.
    replayed = coverage(tmp_path, fleet_csv(2, 4))
    assert "rack_cooling" in replayed.counted
    assert replayed.coverage["gpu_hot_vs_peers"] == 1.0   # no count of its own: the estimate


def test_counter_and_xid_rules_are_judged_where_the_data_has_them(tmp_path: Path) -> None:
    extra = ("1700000000,n0,0,gpu_ecc_dbe_volatile_total,0,r0\n"
             "1700000000,n0,0,xid,13,r0\n")
    summary = coverage(tmp_path, fleet_csv(1, 1, extra))
    assert summary.coverage["gpu_ecc_dbe"] == 0.25       # one of its four samples
    assert ("  gpu_ecc_dbe: judged 25% of GPU samples; not the others: lacked "
            "gpu_ecc_dbe_volatile_total or gpu_ecc_dbe_aggregate_total") in summary.lines()
    assert summary.coverage["gpu_xid_warning"] == 1.0    # the data carries XIDs
    assert summary.coverage["gpu_pcie_replay"] == 0.0


def test_every_rule_that_needs_more_than_its_metrics_is_placed() -> None:
    """A rule that declares no metric, or compares a GPU with others, has an entry in
    replay_reach.REACH, so a new one is not reported as judging every sample."""
    from fleetwatch.models.job_hang import JobHang
    from fleetwatch.models.jobs import JobPeers
    from fleetwatch.models.peers import ThermalPeers
    from fleetwatch.models.rack import RackCooling
    from fleetwatch.models.registry import rules
    from fleetwatch.replay_reach import ANY_FRAME, REACH

    for rule, metrics in rules().items():
        if not metrics:
            assert rule in REACH or rule in ANY_FRAME, rule
    for detector in (ThermalPeers, JobPeers, JobHang, RackCooling):
        for rule in detector.rules:
            r = REACH[rule]
            assert r.peers or r.rack, rule
