"""What a replay's summary says of how it judged real-world data: which part the GPUs are
and which thermal limits were assumed, whether the learned detectors ran and with which
model file, and a detector's own count of what it judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.recorded import frames, read_files
from fleetwatch.replay import ReplayError
from tests.core.realworld_csv import HEADER, T0, fired, fleet, run, write

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
