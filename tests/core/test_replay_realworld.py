"""Replay of recordings as real exports come: AcmeTrace files named by hostname or scaled
by its notebook, DCGM names in the long layout, series stamped a fraction of a second apart,
repeated samples, a GPU that falls off the bus, and jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.recorded import frames, read_files
from fleetwatch.replay import ReplayError
from tests.core.realworld_csv import HEADER, T0, fired, fleet, run, write

# -- 9 and 14: AcmeTrace's columns and its notebook's percent ----------------------------------

def test_acmetrace_hostnames_with_numbers_are_nodes_not_gpus(tmp_path: Path) -> None:
    acme = tmp_path / "acme"
    acme.mkdir()
    write(acme / "GPU_TEMP.csv", "Time,gpu-node-01,gpu-node-02,gpu-node-03\n"
          f"{T0},57,55,56\n{T0 + 15},59,59,60\n")
    write(acme / "NODE_CPU_UTILIZATION.csv", "Time,gpu-node-01,gpu-node-02,gpu-node-03\n"
          f"{T0},0.5,0.4,0.3\n{T0 + 15},0.5,0.4,0.3\n")
    reading = read_files(sorted(acme.iterdir()))
    subjects = {(node, gpu) for (_, node), per in reading.samples.items() for gpu in per}
    assert subjects == {(f"gpu-node-0{i}", g) for i in (1, 2, 3) for g in (0, None)}
    assert any("GPU_TEMP.csv: one column per node; read as GPU 0 of each node (gpu-node-01 is "
               "a node: a hostname's number is no GPU index" in n for n in reading.notes)


@pytest.mark.parametrize("column, node, gpu", [
    ("10.140.1.10-3", "10.140.1.10", 3), ("10.140.1.10_3", "10.140.1.10", 3),
    ("gpu-node-01:3", "gpu-node-01", 3), ("gpu-node-01/gpu3", "gpu-node-01", 3),
    ("gpu-node-01-gpu3", "gpu-node-01", 3), ("10.140.1.10", "10.140.1.10", 0),
    ("node-7", "node-7", 0),
])
def test_acmetrace_gpu_columns(tmp_path: Path, column: str, node: str, gpu: int) -> None:
    reading = read_files([write(tmp_path / "GPU_TEMP.csv", f"Time,{column}\n{T0},60\n")])
    assert dict(reading.samples) == {(T0, node): {gpu: {"gpu_temp_c": 60}}}


@pytest.mark.parametrize("time, cells, read, scale", [
    (str(T0), "0.8,0.5", 0.8,
     "ratios read as 0..1 (0 of 2 values above 1.05, at most 1%, and epoch times"),
    ("2026-05-29 04:26:40+08:00", "0.8,0.5", 0.008,
     "ratios read as percent (0 of 2 values above 1.05, but date-time times: the AcmeTrace "
     "notebook"),
    (str(T0), "80,50", 0.8, "ratios read as percent (2 of 2 values above 1.05, over 1%)"),
])
def test_acmetrace_ratio_scale_is_told_by_the_files_form_and_said(
        tmp_path: Path, time: str, cells: str, read: float, scale: str) -> None:
    reading = read_files([write(tmp_path / "SM_ACTIVE.csv",
                                f"Time,10.0.0.1-0,10.0.0.1-1\n{time},{cells}\n")])
    (per,) = reading.samples.values()
    assert per[0]["gpu_sm_active_ratio"] == pytest.approx(read)
    assert any(scale in n for n in reading.notes)


def test_acmetrace_published_cpu_file_is_in_percent(tmp_path: Path) -> None:
    """The README's own NODE_CPU_UTILIZATION.csv: the notebook's date-time and percent (8.101
    is 8.1 %, not a ratio to multiply by 100 into 810 %, refused as impossible)."""
    reading = read_files([write(tmp_path / "NODE_CPU_UTILIZATION.csv",
                                "Time,10.140.1.10,10.140.1.54\n"
                                "2023-07-01 08:00:00+08:00,8.101,0.437\n")])
    (ts, node), per = next(iter(reading.samples.items()))
    assert per[None]["host_cpu_util_pct"] == pytest.approx(8.101)


# -- 14: DCGM names in the long layout ------------------------------------------------------------

def test_the_long_layout_takes_dcgm_names_in_dcgms_units(tmp_path: Path) -> None:
    text = (HEADER + "\n"
            f"{T0},n1,0,DCGM_FI_DEV_GPU_TEMP,56\n{T0},n1,0,DCGM_FI_DEV_FB_USED,1024\n"
            f"{T0},n1,0,gpu_power_w,300\n")
    reading = read_files([write(tmp_path / "d.csv", text)])
    assert frames(reading)[0][0].gpus[0].metrics == {
        "gpu_temp_c": 56, "gpu_fb_used_bytes": 1024 * 2**20, "gpu_power_w": 300}
    assert ("d.csv: DCGM field names read in DCGM's units: DCGM_FI_DEV_FB_USED as "
            "gpu_fb_used_bytes, DCGM_FI_DEV_GPU_TEMP as gpu_temp_c") in reading.notes
    with pytest.raises(ReplayError, match=r"unknown metric 'DCGM_FI_DEV_NOPE' \(use the "
                                          r"catalogue's names.*a DCGM field name"):
        read_files([write(tmp_path / "e.csv", HEADER + f"\n{T0},n1,0,DCGM_FI_DEV_NOPE,1\n")])


# -- 10: series stamped a fraction of a second apart ----------------------------------------------

def test_a_nodes_series_stamped_apart_meet_in_one_frame(tmp_path: Path) -> None:
    aligned = fleet(8)
    # Each GPU's samples 0.137 s after the previous GPU's, and power 1.5 s after temperature.
    jitter = [aligned.splitlines()[0]]
    for line in aligned.splitlines()[1:]:
        ts, node, gpu, metric, value = line.split(",")
        ts = f"{int(ts) + 0.137 * int(gpu) + (1.5 if metric == 'gpu_power_w' else 0):.3f}"
        jitter.append(",".join((ts, node, gpu, metric, value)))
    a = frames(read_files([write(tmp_path / "a.csv", aligned)]))
    j_reading = read_files([write(tmp_path / "j.csv", "\n".join(jitter) + "\n")])
    j = frames(j_reading)
    assert [b[0].ts for b in j] == [b[0].ts for b in a]        # each tick at its first time
    assert [b[0].gpus for b in j] == [b[0].gpus for b in a]
    assert any("the series of a node carry their own times, up to 1.91 s apart within one "
               "interval (15 s, the median spacing of its series): 64 times read as 8 ticks"
               in n for n in j_reading.notes)
    _, summary = run(tmp_path, "\n".join(jitter) + "\n")
    assert summary.coverage["gpu_hot_vs_peers"] == 1.0
    assert not any("own times" in n for n in read_files([tmp_path / "a.csv"]).notes)


def test_a_series_sampled_unevenly_keeps_every_sample(tmp_path: Path) -> None:
    """Two samples of one series are never gathered into one tick."""
    times = [0, 300, 310, 600, 900, 1200]
    text = HEADER + "\n" + "".join(f"{T0 + t},n1,0,gpu_temp_c,{60 + i}\n"
                                   for i, t in enumerate(times))
    batches = frames(read_files([write(tmp_path / "s.csv", text)]))
    assert [b[0].ts - T0 for b in batches] == times


# -- 11: repeated samples -------------------------------------------------------------------------

def test_repeated_and_conflicting_samples_are_counted(tmp_path: Path) -> None:
    text = fleet(2, gpus=1) + f"{T0},n1,0,gpu_temp_c,60\n{T0 + 15},n1,0,gpu_temp_c,75\n"
    reading = read_files([write(tmp_path / "r.csv", text)])
    assert (reading.repeats, reading.conflicts) == (2, 1)
    assert ("2 repeated samples (the same time, node, GPU and metric; the last kept), 1 with "
            "another value, e.g. n1 GPU 0 gpu_temp_c at 2026-05-28 20:26:55 UTC: 60, then 75: "
            "two sources of one series, or a clock or time-zone fault") in reading.notes


def test_naive_local_times_across_the_dst_fall_back_are_pointed_at(tmp_path: Path) -> None:
    # New York's 2026-11-01 01:30 comes twice; written without an offset, both read as one.
    text = (HEADER + "\n2026-11-01 01:30:00,n1,0,gpu_temp_c,61\n"
            "2026-11-01 01:30:00,n1,0,gpu_temp_c,58\n2026-11-01 01:31:00,n1,0,gpu_temp_c,58\n")
    (note,) = [n for n in read_files([write(tmp_path / "d.csv", text)]).notes
               if "repeated" in n]
    assert "1 with another value" in note
    assert ("times without a zone (read as UTC, see the warning above): local times repeat "
            "an hour where daylight saving time ends") in note


# -- 12: a GPU that falls off the bus; jobs ----------------------------------------------------

def test_a_gpu_whose_series_stop_while_its_node_goes_on_is_lost(tmp_path: Path) -> None:
    # GPU 2's rows stop after tick 9 of 40; the node's other GPUs go on.
    text = "\n".join(line for line in fleet(40).splitlines()
                     if not (",n1,2," in line and int(line.split(",")[0]) >= T0 + 150)) + "\n"
    reading = read_files([write(tmp_path / "x.csv", text)])
    batches = frames(reading)
    states = [{g.index: g.state for g in b[0].gpus}.get(2) for b in batches]
    # Last seen at 135 s; lost once over gpu_lost_silent_s (300 s) have passed: from 450 s.
    # In between it is listed with no metrics, as the agent lists a GPU that missed a read
    # (a frame without it would read as another agent's, node_name_conflict).
    assert states[:30] == ["ok"] * 30
    assert [{g.index: g.metrics for g in b[0].gpus}[2] for b in batches[10:30]] == [{}] * 20
    assert states[30:] == ["lost"] * 10
    assert any("GPUs read as lost" in n and "n1 GPU 2 from 2026-05-28 20:34:10 UTC to the end "
               "(last sample 2026-05-28 20:28:55 UTC)" in n for n in reading.notes)
    changes, summary = run(tmp_path, text)
    assert "gpu_lost" in fired(changes)
    assert summary.coverage["gpu_lost"] == 1.0


def test_a_short_gap_a_returning_gpu_and_a_whole_node_stopping_are_not_lost(
        tmp_path: Path) -> None:
    def keep(line: str) -> bool:
        if not line[0].isdigit():
            return True
        t, gpu = (int(line.split(",")[0]) - T0) // 15, line.split(",")[2]
        return not ((gpu == "1" and t in (5, 6)) or t >= 25)   # 2 missing; then all stop
    text = "\n".join(filter(keep, fleet(30).splitlines())) + "\n"
    reading = read_files([write(tmp_path / "g.csv", text)])
    assert not reading.lost and not any("lost" in n for n in reading.notes)
    # A GPU gone for 5 ticks (75 s) and back: a scrape's gap, not a GPU off the bus.
    text = "\n".join(line for line in fleet(30).splitlines()
                     if not (",n1,3," in line and 10 <= (int(line[:10]) - T0) // 15 < 15))
    reading = read_files([write(tmp_path / "b.csv", text + "\n")])
    assert not reading.lost and not any("lost" in n for n in reading.notes)


def test_the_job_column_lets_the_job_rules_judge_a_stuck_gpu(tmp_path: Path) -> None:
    def row(t: int, g: int) -> str:
        return ",job-42"
    text = fleet(40, gpus=4, cols=",job", row=row)
    extra = "".join(f"{T0 + 15 * t},n1,{g},{m},{v},job-42\n" for t in range(40) for g in range(4)
                    for m, v in (("gpu_util_pct", 100),
                                 ("gpu_sm_active_ratio", 0.0 if g == 1 else 0.95)))
    changes, summary = run(tmp_path, text + extra)
    stuck = [c for c in changes if c["rule"] == "gpu_stuck" and c["state"] == "firing"]
    assert stuck and {c["labels"]["device"] for c in stuck} == {"gpu1"}
    assert summary.coverage["gpu_stuck"] == 1.0
    assert frames(read_files([tmp_path / "f.csv"]))[0][0].gpus[0].job == "job-42"
