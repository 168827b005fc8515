"""Model files the processor must not use as they are: trained on another kind of GPU,
written by a newer fleetwatch, or hand-edited (files holding the wrong objects, writable by
others, named in the future or written at once: ``test_model_file_checks``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.history import FrameDays
from fleetwatch.models.artifact import (
    ModelFileError,
    ModelSet,
    load,
    save,
)
from fleetwatch.models.learned import LearnedDetectors
from fleetwatch.models.thermal_model import ThermalModel
from fleetwatch.train import train_frames

START = 1_763_800_000.0
HOURS = 8
PARAMS = SimParams(nodes=2, gpus=4, nodes_per_rack=2, seed=3, interval_s=60.0)


def model_set(kind: str, meta: dict | None = None) -> ModelSet:
    return ModelSet(ThermalModel(None, kind, {}), None, {}, {"gpus": 1, **(meta or {})})


@pytest.fixture(scope="module")
def a100_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model file trained on 8 h of a simulated A100 fleet."""
    tmp = tmp_path_factory.mktemp("a100")
    end = START + HOURS * 3600
    history, sim = FrameDays(START, end), FleetSim(PARAMS, START)
    while sim.ts < end - 1:
        sim.step()
        history.add(sim.frames())
    path, meta = train_frames(history, START, end, tmp / "models")
    assert meta["gpu_power_limits_w"] == {"500": {"gpus": 8, "samples": 8 * HOURS * 60 // 1}}
    return path


def run_h100(directory: Path, hours: float = 2) -> tuple[LearnedDetectors, list, int]:
    """Learned findings and GPU samples given a thermal health score, over ``hours`` of
    a healthy H100 fleet."""
    learned = LearnedDetectors(directory)
    sim = FleetSim(SimParams(nodes=2, gpus=4, nodes_per_rack=2, seed=4, interval_s=60.0,
                             part="h100"), START + 86400)
    found, scored = [], 0
    for _ in range(int(hours * 60)):
        sim.step()
        batch = sim.frames()
        learned.enrich(batch)
        found += learned.update(batch)
        scored += sum("gpu_thermal_health_score" in g.metrics for f in batch for g in f.gpus)
    return learned, found, scored


def test_a_model_of_a100s_does_not_score_h100s_and_says_why(
        a100_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fleetwatch.models.learned")
    learned, found, scored = run_h100(a100_model.parent)
    assert [f for f in found if f.rule in ("thermal_health", "fleet_anomaly")] == []
    assert scored == 0
    given = 2 * 60 * 8
    assert learned.coverage() == {"thermal_health": (0, given), "fleet_anomaly": (0, given)}
    said = [r.getMessage() for r in caplog.records if "not scoring" in r.getMessage()]
    assert len(said) == 1  # once per kind of GPU, not per batch
    assert "trained on GPUs with a power limit of 500 W; NVIDIA H100 80GB HBM3 has 700 W" \
        in said[0] and "train on this fleet" in said[0]
    assert "train on this fleet" in learned.not_judged["fleet_anomaly"]
    # A file from before the kinds were recorded scores them all, as it did, and says so.
    models = load(a100_model)
    del models.metadata["gpu_power_limits_w"]
    save(models, tmp_path / "old", now=START)
    caplog.clear()
    learned, _, scored = run_h100(tmp_path / "old")
    assert scored > 0 and learned.coverage()["thermal_health"] == (given, given)
    assert "does not record which GPUs it was trained on" in caplog.text


def test_metrics_say_a_loaded_model_judges_no_gpu_and_why(a100_model: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from fleetwatch.pipeline.model_metrics import ModelCollector

    def scraped(learned: LearnedDetectors) -> str:
        registry = CollectorRegistry()
        registry.register(ModelCollector([learned]))
        return generate_latest(registry).decode()

    learned, _, _ = run_h100(a100_model.parent, hours=0.5)
    text = scraped(learned)
    assert f'fleetwatch_model_loaded{{file="{a100_model.name}"}} 1.0' in text
    for rule in ("thermal_health", "fleet_anomaly"):
        assert f'fleetwatch_model_gpus_judged{{reason="other_gpu_kind",rule="{rule}"}} 0.0' \
            in text
        assert f'fleetwatch_model_gpus_given{{rule="{rule}"}} 8.0' in text
    # The fleet it was trained on: every GPU judged, no reason.
    judged = LearnedDetectors(a100_model.parent)
    sim = FleetSim(PARAMS, START + 86400)
    for _ in range(3):
        sim.step()
        judged.update(sim.frames())
    assert 'fleetwatch_model_gpus_judged{reason="",rule="thermal_health"} 8.0' in scraped(judged)
    judged.drop(["node-000"])
    assert 'fleetwatch_model_gpus_given{rule="thermal_health"} 4.0' in scraped(judged)


def test_a_learned_alert_names_the_model_file_that_raised_it(
        a100_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetwatch.models import Finding
    from fleetwatch.models.artifact import named_ts
    from fleetwatch.pipeline.processor import Processor
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    learned = LearnedDetectors(a100_model.parent)
    sim = FleetSim(PARAMS, START + 86400)

    def hot(frames: list) -> list[Finding]:
        f = frames[0]
        return [Finding("thermal_health", f.cluster, f.rack, f.node, 0, f.ts, 6.0, "hot",
                        evidence={"excess_c": 6.0})]

    monkeypatch.setattr(learned.thermal, "update", hot)
    store = SqliteStore(tmp_path / "live.db")
    processor = Processor(store, [learned])
    for _ in range(3):
        sim.step()
        processor.process(sim.frames())
    [alert] = [a for a in store.alerts() if a.rule == "thermal_health"]
    store.close()
    assert alert.evidence["model_ts"] == named_ts(a100_model)
    assert alert.evidence["excess_c"] == 6.0


def test_a_power_limit_walked_down_by_a_brake_is_said_once_not_once_a_watt(
        a100_model: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tests.models.helpers import busy, node

    caplog.set_level(logging.INFO, "fleetwatch.models.learned")
    learned = LearnedDetectors(a100_model.parent)
    for k in range(40):  # a power brake lowers GPU 0's limit 4 W a tick, 500 W to 344 W
        frame = node(START + 86400 + 15.0 * k,
                     [busy(60.0, gpu_power_limit_w=500.0 - 4.0 * k)] + [busy(60.0)] * 3,
                     model="NVIDIA A100-SXM4-80GB")
        learned.enrich([frame])
        learned.update([frame])
    said = [r.getMessage() for r in caplog.records if "not scoring" in r.getMessage()]
    assert len(said) == 1, said
    assert "NVIDIA A100-SXM4-80GB has 448 W" in said[0]  # the first outside the tolerance
    assert "not said again" in said[0]


def _rewritten(source: Path, directory: Path, name: str, **changes: object) -> Path:
    """``source`` with its metadata line changed as by hand (the pickle left as it was)."""
    head, body = source.read_bytes().split(b"\n", 1)
    meta = {**json.loads(head), **changes}
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_bytes(json.dumps(meta, sort_keys=True).encode() + b"\n" + body)
    return path


def test_a_file_from_a_newer_fleetwatch_is_refused_with_upgrade_advice(
        a100_model: Path, tmp_path: Path) -> None:
    newer = _rewritten(a100_model, tmp_path, "fleetwatch-model-20251123T000000.fwm",
                       fleetwatch="0.2.0")
    with pytest.raises(ModelFileError, match=r"written by fleetwatch 0\.2\.0 .*newer than "
                       r"this one \(0\.1\.0, format 2\): upgrade fleetwatch on this host"):
        load(newer)
    later = _rewritten(a100_model, tmp_path, "fleetwatch-model-20251123T000001.fwm", format=3)
    with pytest.raises(ModelFileError, match="upgrade fleetwatch"):
        load(later)
    older = _rewritten(a100_model, tmp_path, "fleetwatch-model-20251123T000002.fwm", format=1)
    with pytest.raises(ModelFileError, match=r"format 1; .*run `fleetwatch train` again"):
        load(older)


def test_hand_edited_metadata_is_refused_and_the_models_in_use_stay(
        a100_model: Path, tmp_path: Path) -> None:
    d = tmp_path / "models"
    d.mkdir()
    good = d / a100_model.name
    good.write_bytes(a100_model.read_bytes())
    edited = _rewritten(a100_model, d, "fleetwatch-model-20991231T000000.fwm",
                        gpu_power_limits_w={"700": {"gpus": 8, "samples": 1}})
    assert load(good).metadata["gpu_power_limits_w"] == {"500": {"gpus": 8, "samples": 3840}}
    with pytest.raises(ModelFileError, match="metadata line is not the one written with its "
                                             "models"):
        load(edited)
    import time

    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(time.time() + 60))
    later = d / f"fleetwatch-model-{stamp}.fwm"
    edited.rename(later)  # newer than the good one, not in the future
    learned = LearnedDetectors(d)
    assert learned.loaded == good
    assert "not the one written with its models" in learned.skipped[later]
