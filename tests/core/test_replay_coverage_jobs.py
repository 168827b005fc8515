"""The replay summary's reasons for what the peer and job rules did not judge on nodes whose
GPUs are in several jobs: an inference node (one job a GPU) has enough GPUs, in other jobs;
unallocated GPUs have no job though the data has jobs."""

from __future__ import annotations

import inspect
from pathlib import Path

from fleetwatch.config import DetectorsConfig
from fleetwatch.recorded import frames, read_files
from fleetwatch.replay_coverage import ReplaySummary, coverage
from fleetwatch.replay_reach import REACH
from fleetwatch.wiring import detectors


def summary_of(tmp_path: Path, rows: list[tuple[str, int, str]],
               power: dict[int, float] | None = None) -> ReplaySummary:
    """(node, GPU, job) for four ticks, each with temperature, power (300 W, or ``power``'s
    for that GPU) and utilization."""
    lines = ["timestamp,node,gpu,metric,value,job"]
    for t in range(4):
        for node, gpu, job in rows:
            watts = (power or {}).get(gpu, 300)
            for metric, value in (("gpu_temp_c", 60 + gpu), ("gpu_power_w", watts),
                                  ("gpu_util_pct", 90)):
                lines.append(f"{1_700_000_000 + 15 * t},{node},{gpu},{metric},{value},{job}")
    path = tmp_path / "f.csv"
    path.write_text("\n".join(lines) + "\n")
    summary = ReplaySummary()
    coverage(frames(read_files([path])), detectors(DetectorsConfig()), summary)
    return summary


def test_an_inference_node_has_gpus_in_other_jobs_not_too_few(tmp_path: Path) -> None:
    # pods at one power are each other's thermal peers (models/peer_stats.heat_peers)
    same = summary_of(tmp_path, [("inf", g, f"pod{g}") for g in range(8)])
    assert same.coverage["gpu_hot_vs_peers"] == 1.0
    # pods 100 W apart are not: the reason names their powers, not too few GPUs
    summary = summary_of(tmp_path, [("inf", g, f"pod{g}") for g in range(8)],
                         {g: 100 + 100 * g for g in range(8)})
    assert summary.coverage["gpu_hot_vs_peers"] == 0.0
    why = summary.unjudged["gpu_hot_vs_peers"]
    assert why.startswith("no peers at its power (") and "other jobs within 60 W" in why
    assert "at most 7" not in why and "the data has" not in why
    stuck = summary.unjudged["gpu_stuck"]
    assert stuck.startswith("GPUs alone in their job on their node") and "no jobs" not in stuck


def test_unallocated_gpus_and_one_gpu_jobs_are_each_said(tmp_path: Path) -> None:
    rows = ([("trn", g, "a") for g in range(4)] + [("trn", g, "") for g in range(4, 8)]
            + [("inf", g, f"pod{g}") for g in range(4)])
    summary = summary_of(tmp_path, rows, {g: 100 + 150 * g for g in range(4)})
    assert summary.coverage["gpu_stuck"] == 4 / 12
    why = summary.unjudged["gpu_stuck"]
    assert "no jobs in the data" not in why
    assert "GPUs without a job (unallocated" in why and "(33% of GPU samples)" in why
    assert "GPUs alone in their job on their node" in why
    # trn's four unallocated GPUs are thermal peers of each other (both without a job, three
    # others each), its job's four too; the inference node's pods, at other powers, are not
    assert summary.coverage["gpu_hot_vs_peers"] == 8 / 12
    assert summary.unjudged["gpu_hot_vs_peers"].startswith("no peers at its power (")


def test_without_jobs_in_the_data_it_says_so(tmp_path: Path) -> None:
    summary = summary_of(tmp_path, [("n", g, "") for g in range(2)])
    assert summary.unjudged["gpu_stuck"] == ("no jobs in the data (it compares the GPUs of "
                                             "one job)")
    assert summary.unjudged["gpu_hot_vs_peers"] == (
        "no peers (it needs 3 or more other GPUs of its node reporting gpu_temp_c; the data "
        "has at most 1)")


def test_the_reach_of_the_peer_rules_is_the_mask_their_detectors_use() -> None:
    """The reasons are phrased from REACH: a detector that picks its peers otherwise (not
    only within the GPU's job, peer_stats.same_job_peers) must change its REACH with it, or
    the summary says false reasons."""
    from fleetwatch.models.jobs import JobPeers
    from fleetwatch.models.peers import ThermalPeers

    for detector in (ThermalPeers, JobPeers):
        source = inspect.getsource(detector)
        picks_within_job = "same_job_peers(" in source and "node_peers(" not in source \
            and "heat_peers(" not in source
        by_power = "heat_peers(" in source  # its job first, then other jobs at its power
        for rule in detector.rules:  # (gpu_power_limit_low compares a GPU with its node's)
            if REACH[rule].same_job or detector is ThermalPeers:
                assert REACH[rule].same_job == (picks_within_job or by_power), rule
                assert bool(REACH[rule].near_w) == by_power, rule
