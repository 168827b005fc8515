"""Replay of recordings as real exports come: a GPU's part named, the learned detectors
asked for, AcmeTrace files named by hostname or scaled by its notebook, DCGM names in the
long layout, series stamped a fraction of a second apart, repeated samples, a GPU that
falls off the bus, jobs, and a detector's own count of what it judged."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.config import DetectorsConfig
from fleetwatch.recorded import frames, read_files
from fleetwatch.replay import ReplayError, replay
from fleetwatch.wiring import detectors

T0 = 1_780_000_000
HEADER = "timestamp,node,gpu,metric,value"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def fleet(ticks: int, gpus: int = 4, step: int = 15, node: str = "n1", extra: str = "",
          cols: str = "", row=None) -> str:  # noqa: ANN001 - row(t, g) -> extra cells
    """A node whose GPUs run at 60 + g °C and 300 W, every ``step`` s."""
    lines = [HEADER + cols]
    for t in range(ticks):
        for g in range(gpus):
            more = row(t, g) if row else ""
            lines.append(f"{T0 + step * t},{node},{g},gpu_temp_c,{60 + g}{more}")
            lines.append(f"{T0 + step * t},{node},{g},gpu_power_w,300{more}")
    return "\n".join(lines) + "\n" + extra


def run(tmp_path: Path, text: str, dets: list | None = None, **kw) -> tuple[list[dict], object]:
    out = io.StringIO()
    summary = replay([write(tmp_path / "f.csv", text)],
                     detectors(DetectorsConfig()) if dets is None else dets, out, **kw)
    return [json.loads(line) for line in out.getvalue().splitlines()], summary


def fired(changes: list[dict]) -> set[str]:
    return {c["rule"] for c in changes if c["state"] == "firing"}


# -- 6: which part the GPUs are, and which thermal limits were assumed ---------------------------

def a10g(cols: str = "", model: str = "") -> str:
    """An A10G (slowdown 95 °C) at a steady 88 °C: healthy for its part."""
    rows = [HEADER + cols] + [f"{T0 + 15 * t},a10g-node,0,gpu_temp_c,88{model}"
                              for t in range(20)]
    return "\n".join(rows) + "\n"


def test_the_gpu_model_gives_the_parts_limits_and_the_summary_says_which(tmp_path: Path) -> None:
    changes, summary = run(tmp_path, a10g())
    assert "gpu_temp_critical" in fired(changes)           # 88 °C against the fallback 87 °C
    note = next(n for n in summary.notes if n.startswith("thermal limits:"))
    assert "assumed for 1 GPUs: slowdown 87 °C, shutdown 92 °C" in note
    assert "--gpu-model" in note
    changes, summary = run(tmp_path, a10g(), gpu_model="NVIDIA A10G")
    assert not fired(changes) & {"gpu_temp_critical", "gpu_temp_high"}
    assert ("thermal limits: NVIDIA A10G's for 1 GPUs: slowdown 95 °C, shutdown 98 °C"
            in summary.notes)
    # The long layout's model column says the same, GPU by GPU.
    changes, summary = run(tmp_path, a10g(",model", ",NVIDIA A10G"))
    assert not fired(changes) & {"gpu_temp_critical", "gpu_temp_high"}
    assert frames(read_files([tmp_path / "f.csv"]))[0][0].gpus[0].model == "NVIDIA A10G"


def test_nvml_thresholds_in_the_data_are_said_and_an_unknown_part_is_refused(
        tmp_path: Path) -> None:
    text = a10g() + "".join(f"{T0 + 15 * t},a10g-node,0,{m},{v}\n" for t in range(20)
                            for m, v in (("gpu_slowdown_temp_c", 95), ("gpu_shutdown_temp_c", 98)))
    changes, summary = run(tmp_path, text)
    assert not fired(changes) & {"gpu_temp_critical", "gpu_temp_high"}
    assert any(n.startswith("thermal limits: NVML's own") for n in summary.notes)
    with pytest.raises(ReplayError, match=r"--gpu-model 'Radeon MI300X': no GPU part fleetwatch "
                                          r"knows.*NVIDIA H100 80GB HBM3"):
        run(tmp_path, text, gpu_model="Radeon MI300X")


def test_the_cli_takes_gpu_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "a.csv", a10g())
    assert main(["replay", "--gpu-model", "NVIDIA A10G", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "NVIDIA A10G's for 1 GPUs" in err


# -- 7: the learned detectors ---------------------------------------------------------------------

def test_replay_says_the_learned_detectors_did_not_run_and_models_adds_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "a.csv", fleet(8))
    assert main(["replay", str(path)]) == 0
    err = capsys.readouterr().err
    assert ("learned detectors (thermal_health, fleet_anomaly, lemon_node): not run, only the "
            "rules were given; `fleetwatch replay --models` adds them") in err
    empty = tmp_path / "models"
    monkeypatch.setenv("FLEETWATCH_MODELS_DIR", str(empty))
    assert main(["replay", "--models", str(path)]) == 0
    err = capsys.readouterr().err
    assert (f"learned detectors: thermal_health, fleet_anomaly not run: no model file in {empty} "
            "(`fleetwatch train` writes one); lemon_node ran") in err
    assert f"  thermal_health: not judged: no model file in {empty}" in err
    monkeypatch.setenv("FLEETWATCH_MODELS_ENABLED", "false")
    assert main(["replay", "--models", str(path)]) == 2
    assert "--models, but models.enabled is false" in capsys.readouterr().err


class _Part:
    def __init__(self, rule: str, model: object) -> None:
        self.rules, self.model = {rule: ("gpu_temp_c", "gpu_power_w")}, model


class FakeLearned:
    """What the summary reads of ``models.learned.LearnedDetectors``."""

    name = "learned"

    def __init__(self, loaded: Path | None, thermal: object, anomaly: object) -> None:
        self.directory = Path("models")
        self.loaded = loaded
        self.thermal, self.anomaly = _Part("thermal_health", thermal), _Part("fleet_anomaly",
                                                                            anomaly)
        self.rules = {**self.thermal.rules, **self.anomaly.rules, "lemon_node": ()}

    def update(self, frames):  # noqa: ANN001, ANN201
        return []


def test_the_summary_names_the_model_file_the_learned_detectors_ran_with(
        tmp_path: Path) -> None:
    model = Path("models/fleetwatch-model-20261126T000000.fwm")
    _, summary = run(tmp_path, fleet(4), [FakeLearned(model, object(), object())])
    assert f"learned detectors: ran, with the model file {model}" in summary.notes
    assert summary.coverage["thermal_health"] == 1.0
    _, summary = run(tmp_path, fleet(4), [FakeLearned(model, object(), None)])
    assert summary.coverage == {"thermal_health": 1.0, "fleet_anomaly": 0.0, "lemon_node": 1.0}
    assert summary.unjudged["fleet_anomaly"] == (f"the model file {model} holds no model for it "
                                                 "(too little history of it)")
    broken = tmp_path / "models"
    broken.mkdir()
    (broken / "fleetwatch-model-20261126T000000.fwm").write_text("cut short")
    learned = FakeLearned(None, None, None)
    learned.directory = broken
    _, summary = run(tmp_path, fleet(4), [learned])
    assert (f"learned detectors: thermal_health, fleet_anomaly not run: no model file in {broken} "
            "loads (the warnings above say why); lemon_node ran") in summary.notes


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


# -- a detector's own count of what it judged ---------------------------------------------------

class Counting:
    """A detector that judges only every fourth GPU sample it is given, and says so."""

    name = "counting"
    rules = {"rack_cooling": ("gpu_temp_c",)}

    def __init__(self) -> None:
        self.given = self.judged = 0

    def update(self, frames):  # noqa: ANN001, ANN201
        for f in frames:
            for _ in f.gpus:
                self.judged += self.given % 4 == 0
                self.given += 1
        return []

    def coverage(self) -> dict[str, tuple[int, int]]:
        return {"rack_cooling": (self.judged, self.given)}


def test_a_detectors_own_count_replaces_the_estimate(tmp_path: Path) -> None:
    counting = Counting()
    counting.given = counting.judged = 7   # counted before this replay: not this one's
    _, summary = run(tmp_path, fleet(5, gpus=2, node="n1") + "".join(
        f"{T0 + 15 * t},n2,{g},gpu_temp_c,60\n" for t in range(5) for g in range(2)),
        [counting])
    assert summary.coverage["rack_cooling"] == 0.25
    assert ("  rack_cooling: judged 25% of GPU samples (its detector's count); not the others: "
            "the detector's own conditions did not hold (e.g. its warm-up, a load steady "
            "for long enough, or power in the data)") in summary.lines()


def test_a_small_share_is_not_rounded_to_nothing() -> None:
    from fleetwatch.replay_coverage import ReplaySummary

    lines = ReplaySummary(coverage={"a": 18 / 15392, "b": 0.0004, "c": 0.996}).lines()
    assert "  a: judged 0.1% of GPU samples" in lines
    assert "  b: judged under 0.1% of GPU samples" in lines
    assert "  c: judged 99.6% of GPU samples" in lines


# -- 14: train and alerts on the command line --------------------------------------------------

def test_train_on_a_missing_store_is_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexist.db"
    assert main(["train", "--store", str(missing), "--duration", "2h"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fleetwatch train: no store at {missing}") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, named", [(["--duration", "20m"], "--duration 20 min"),
                                         (["--duration", "0"], "--duration 0 s"),
                                         (["--days", "500"], "--days 500")])
def test_a_training_span_out_of_range_names_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str) -> None:
    assert main(["train", "--store", str(tmp_path / "x.db"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fleetwatch train: {named}: train on 1 h to 400 d of history")
    assert "configuration error" not in err


def test_train_warns_of_phases_without_a_model_and_ends_in_utc(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetwatch.train
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    db = tmp_path / "h.db"
    SqliteStore(db).close()
    meta = {"train_s": 1.0, "gpus": 8, "thermal_regressor": "huber",
            "thermal_heldout_mae_c": {}, "thermal_spread_c": 1.0, "anomaly_phases": {3: 85},
            "anomaly_phases_missing": ["idle", "light", "medium"], "lemon_nodes": 0}
    monkeypatch.setattr(fleetwatch.train, "train",
                        lambda *a, **k: (tmp_path / "m.fwm", meta))
    assert main(["train", "--store", str(db), "--duration", "1h", "--end", "1780000000",
                 "--out", str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    assert "training on 1 h of sqlite store history ending 2026-05-28 20:26 UTC" in err
    named = ("idle work (SM activity under 5%), light work (SM activity 5%-30%), medium work "
             "(SM activity 30%-60%)")
    assert f"warning: the anomaly model has no model of {named}" in err
    from fleetwatch.cli_history import _phases_without_model

    assert _phases_without_model({"anomaly_phases": {"3": 85}}) == named   # an older file
    assert _phases_without_model({"anomaly_phases": {str(p): 60 for p in range(4)}}) == ""


def test_alerts_since_echoes_what_was_typed(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    db = tmp_path / "a.db"
    SqliteStore(db).close()
    assert main(["alerts", "--store", str(db), "--since", "48h"]) == 0
    assert "none resolved in the last 48h" in capsys.readouterr().out


def test_a_named_part_without_known_limits_gets_advice_that_is_not_circular(
        tmp_path: Path) -> None:
    """--gpu-model named a part fleetwatch knows the TDP of, not the thermal limits: naming
    it again is no advice; its limits are to be given (config or NVML's thresholds)."""
    from fleetwatch.parts import thermal_limits_c

    part = "Some GPU Model 9"
    assert thermal_limits_c(part) is None
    rows = [HEADER.strip() + ",model"] + [f"{T0 + 15 * t},n,0,gpu_temp_c,88,{part}"
                                           for t in range(20)]
    changes, summary = run(tmp_path, "\n".join(rows) + "\n")
    note = next(n for n in summary.notes if n.startswith("thermal limits:"))
    assert "assumed for 1 GPUs: slowdown 87 °C, shutdown 92 °C" in note
    assert f"fleetwatch knows no thermal limits of {part}" in note
    assert "--gpu-model" not in note
    assert ("set detectors.fallback_slowdown_c and detectors.fallback_shutdown_c in the "
            "config") in note and "gpu_slowdown_temp_c and gpu_shutdown_temp_c" in note
    crit = next(c for c in changes if c["rule"] == "gpu_temp_critical")
    assert "assumed" in crit["message"], crit
    assert crit["evidence"]["limits_assumed"] == 1.0
