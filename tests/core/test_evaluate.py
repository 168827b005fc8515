from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from fleetwatch.cli import main
from fleetwatch.evaluate import EvalOptions, evaluate, schedule, sim_params, truths
from fleetwatch.models.rules import GpuTemperatureLimit

# Small runs inject cooling faults only: every kind in both modes needs a bigger fleet.
SMALL = EvalOptions(gpus=64, hours=3.0, per_kind=2, seed=3, kinds=("cooling",))


def test_a_small_evaluation_scores_every_kind_in_the_documented_shape() -> None:
    seen: list[tuple[str, float]] = []
    result = evaluate(SMALL, {"rules": lambda: [GpuTemperatureLimit(85, 60)]},
                      lambda run, done: seen.append((run, done)))
    assert result["gpus"] == 64 and result["faults"] == 4  # 2 sudden, 2 drifting
    cooling = result["kinds"]["cooling"]
    assert set(cooling) >= {"recall", "precision", "delay_p50_s", "delay_p95_s"}
    # Severity 1.6-2.5 times the thermal resistance pushes a busy A100 past 85 °C.
    assert cooling["recall"] > 0 and cooling["delay_p50_s"] > 0
    assert 0 <= result["precision"] <= 1
    assert result["false_alarms_per_1000_gpu_days"] >= 0
    assert list(result["columns"]) == ["rules"]
    assert ("faults", 1.0) in seen and ("healthy", 1.0) in seen   # progress of both runs
    # Noise: alerts and notified alerts per detected incident, re-fires, in the JSON too.
    noise = result["noise"]
    assert noise["kinds"]["cooling"]["alerts_per_incident_max"] >= 1
    assert 1 <= noise["kinds"]["cooling"]["notified_per_incident_p50"] <= (
        noise["kinds"]["cooling"]["alerts_per_incident_p50"])
    assert noise["kinds"]["cooling"]["refires"] >= 0
    assert set(noise["healthy"]) == {"alerts", "notified", "refires"}
    assert result["columns"]["rules"]["noise"] == noise


def test_two_detector_sets_are_two_columns_of_the_same_run() -> None:
    sets = {"strict": lambda: [GpuTemperatureLimit(95, 60)],
            "loose": lambda: [GpuTemperatureLimit(80, 0)]}
    small = EvalOptions(gpus=32, hours=2.0, per_kind=1, seed=1, kinds=("cooling",))
    result = evaluate(small, sets, workers=2)
    serial = evaluate(small, sets, workers=1)
    assert serial["columns"] == result["columns"]             # same seed, same result
    strict, loose = result["columns"]["strict"], result["columns"]["loose"]
    assert strict["alerts"] <= loose["alerts"]
    assert result["precision"] == loose["precision"]          # the top level is the last set


def test_the_schedule_uses_distinct_gpus_inside_the_run() -> None:
    faults = schedule(sim_params(SMALL, 0), SMALL)
    assert len({(f.node, f.gpu) for f in faults}) == len(faults) == 4
    assert all(f.start_s >= 1800 and f.start_s + f.duration_s <= 3 * 3600 for f in faults)


def test_a_schedule_that_cannot_fit_says_what_to_change() -> None:
    every_kind = EvalOptions(gpus=16, hours=1.0, per_kind=1)
    with pytest.raises(ValueError, match=r"1 faults of each kind and mode \(--per-kind\) do "
                       r"not fit on 16 GPUs \(--gpus: 2 nodes of 8, 4 a rack\) in 1 h "
                       r"\(--hours\)") as exc:
        schedule(sim_params(every_kind, 0), every_kind)
    # What would fit, found by trying: each suggestion is a schedule that can be drawn.
    fits = str(exc.value).split("this would fit: ", 1)[1]
    gpus = int(fits.split("--gpus ", 1)[1].split(",")[0])
    bigger = dataclasses.replace(every_kind, gpus=gpus)
    assert schedule(sim_params(bigger, 0), bigger)
    assert "--kinds" in fits


def test_an_evaluation_shorter_than_its_warm_up_is_refused_naming_the_flag() -> None:
    for hours in (0.25, 0.5, 0.99):
        short = EvalOptions(gpus=4000, hours=hours, per_kind=1, kinds=("cooling",))
        with pytest.raises(ValueError, match=rf"--hours {hours:g}: an evaluation needs at least "
                                             "1 h"):
            schedule(sim_params(short, 0), short)
    one = EvalOptions(gpus=64, hours=1.0, per_kind=1, kinds=("cooling",))
    assert len(schedule(sim_params(one, 0), one)) == 2  # the shortest: a drift and a sudden


def test_ground_truth_fields_of_a_richer_simulator_are_read_when_present() -> None:
    rich = SimpleNamespace(kind="rack_cooling", mode="sudden", rack="rack-07", node="", gpu=None,
                           onset_ts=100.0, end_ts=200.0, severity=2.0, first_faulty_ts=115.0)
    plain = SimpleNamespace(kind="cooling", node="node-001", gpu=3, onset_ts=10.0, end_ts=20.0,
                            severity=2.0)
    sim = SimpleNamespace(ground_truth=[rich, plain], node_names=["node-001"],
                          _node_racks=["rack-00"])
    a, b = truths(sim)  # type: ignore[arg-type]
    assert (a.scope, a.rack, a.mode, a.first_ts) == ("rack", "rack-07", "sudden", 115.0)
    assert (b.scope, b.rack, b.mode, b.first_ts) == ("gpu", "rack-00", "drift", 10.0)


def test_cli_evaluate_json_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "--gpus", "16", "--hours", "1", "--per-kind", "1", "--json",
                 "--workers", "1"]) == 2  # every kind does not fit on 2 nodes in an hour
    err = capsys.readouterr().err
    assert "(--gpus: 2 nodes of 8" in err and "(--hours)" in err and "this would fit" in err
    # Shorter than the warm-up: the flag's stated range (1 to 744) refuses it, naming the
    # flag, not random_schedule's arguments.
    with pytest.raises(SystemExit) as usage:
        main(["evaluate", "--hours", "0.5", "--workers", "1"])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "--hours: '0.5' must be between 1 and 744" in err and "random_schedule" not in err
    assert main(["evaluate", "--gpus", "32", "--hours", "2", "--per-kind", "1", "--json",
                 "--workers", "1", "--kinds", "cooling", "--interval", "5s", "--part", "h100"]) == 0
    out, err = capsys.readouterr()
    last = json.loads(out.splitlines()[-1])
    assert set(last) >= {"kinds", "precision", "false_alarms_per_1000_gpu_days"}
    assert last["interval_s"] == 5 and "a sample every 5 s" in err
    assert last["part"] == "h100" and "32 GPUs (h100)" in err
    assert "evaluate: healthy run" in err
    assert main(["evaluate", "--kinds", "meteor"]) == 2
    assert "unknown fault kind" in capsys.readouterr().err
    for bad in (["--gpus", "0"], ["--hours", "nan"], ["--per-kind", "1e400"],
                ["--interval", "0"], ["--interval", "1e400"], ["--part", "v100"]):
        with pytest.raises(SystemExit):
            main(["evaluate", *bad])


def test_cli_evaluate_two_workers_show_progress_of_both_runs() -> None:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "evaluate", "--gpus", "16",
                          "--hours", "2", "--per-kind", "1", "--kinds", "cooling", "--json"],
                         capture_output=True, text=True, timeout=120, check=True)
    assert "evaluate: faults run 100.0%" in run.stderr
    assert "evaluate: healthy run 100.0%" in run.stderr
    assert json.loads(run.stdout.splitlines()[-1])["kinds"]["cooling"]["recall"] == 1.0


def test_the_detectors_as_configured_judge_an_h100_fleet_without_retuning() -> None:
    """Tuned on neither part in particular: on the H100's physics (a die that jumps 0.025
    °C/W, 700 W at the cap, slowdown at 89 °C) they catch thermal faults and stay quiet on
    the healthy fleet, as on the A100's."""
    from fleetwatch.config import Config
    from fleetwatch.evaluate import detector_sets

    small = EvalOptions(gpus=256, hours=6.0, per_kind=3, seed=5, part="h100",
                        kinds=("cooling", "rack_cooling"))
    result = evaluate(small, detector_sets(Config(), False), workers=2)
    assert result["part"] == "h100" and result["faults"] == 12   # 3 of each kind and mode
    assert result["kinds"]["rack_cooling"]["modes"]["sudden"]["recall"] == 1.0
    # Two of the three sudden cooling faults. The third (node-000 GPU 0) fails while its GPU
    # idles (+3.5 °C at 72 W); its first job starts 40 min later in NCCL waits at ~150 W,
    # 8-10 °C above its peers: under what the peer rule allows a GPU whose offset is not
    # learned yet (max_offset_c 8 °C + the 5 °C margin), so it is learned as a warm GPU.
    # With the power law fit to the GEMM alone those waits drew ~200 W, and the GPU crossed
    # that line 70 min after the onset.
    assert result["kinds"]["cooling"]["modes"]["sudden"]["detected"] >= 2
    assert result["precision"] == 1.0
    assert result["false_alarms_per_1000_gpu_days"] == 0.0


def test_the_healthy_fleet_is_also_run_in_a_hot_room_with_its_notified_alarms() -> None:
    """A summer room: the thermal rules' alarms counted, and how many the room alert (or a
    node or rack alert) inhibits. The default run judged only a room held at 22 °C."""
    from fleetwatch.config import DetectorsConfig
    from fleetwatch.wiring import detectors

    small = EvalOptions(gpus=128, hours=6.0, per_kind=1, seed=0, kinds=("cooling",),
                        part="h100")
    result = evaluate(small, {"rules": lambda: detectors(DetectorsConfig())}, workers=2)
    hot = result["hot_room"]
    assert hot["inlet_c"] == 32.0 and result["inlet_c"] == 22.0
    assert hot["alarms"].get("room_inlet_hot") == 1      # one finding for the room
    assert hot["false_alarms_per_1000_gpu_days"] > hot["notified_per_1000_gpu_days"]
    # What pages: the room, and no GPU thermal alert the room explains after it fired.
    assert set(hot["notified"]) <= {"room_inlet_hot", "gpu_temp_high", "gpu_hot_vs_peers",
                                    "gpu_hot_vs_peers_critical"}
    assert result["columns"]["rules"]["hot_room"] == hot
    none = evaluate(dataclasses.replace(small, hot_inlet_c=None, hours=1.0),
                    {"rules": lambda: []}, workers=1)
    assert "hot_room" not in none


def test_notified_leaves_out_what_a_firing_room_alert_inhibits() -> None:
    from fleetwatch.pipeline.store.base import Alert
    from fleetwatch.scoring import notified

    def alert(rule: str, node: str, device: str, state: str, ts: float) -> Alert:
        return Alert(f"{rule}/{node}/{device}", rule, "critical", "c", "r1" if node else "*",
                     node, device, state, 0.0, ts, 1.0, "", fired_ts=ts if state != "pending"
                     else None)  # type: ignore[arg-type]

    changes = [alert("room_inlet_hot", "", "rack:*", "firing", 10.0),
               alert("gpu_temp_critical", "n1", "gpu0", "firing", 20.0),
               alert("gpu_hot_vs_peers", "n2", "gpu1", "pending", 25.0),
               alert("gpu_temp_critical", "n2", "gpu1", "firing", 30.0),
               alert("room_inlet_hot", "", "rack:*", "resolved", 40.0),
               alert("gpu_temp_high", "n3", "gpu0", "firing", 50.0)]
    assert [(a.rule, a.node) for a in notified(changes)] == [
        ("room_inlet_hot", ""), ("gpu_temp_critical", "n2"), ("gpu_temp_high", "n3")]


def test_cli_evaluate_room_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "--gpus", "16", "--hours", "1", "--per-kind", "1", "--kinds",
                 "cooling", "--json", "--workers", "1", "--inlet-c", "30",
                 "--no-hot-room"]) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["inlet_c"] == 30 and "hot_room" not in last
    assert main(["evaluate", "--gpus", "16", "--hours", "1", "--per-kind", "1", "--kinds",
                 "cooling", "--workers", "1", "--hot-inlet-c", "33"]) == 0
    assert "healthy fleet in a 33 °C room" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["evaluate", "--inlet-c", "50"])
    assert "--inlet-c: '50' must be between 5 and 45" in capsys.readouterr().err
