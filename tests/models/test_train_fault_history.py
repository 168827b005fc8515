"""A model retrained on a history that holds a fault still flags that fault.

A GPU whose cooling degrades slowly through the training range must not have the fault
learnt as its own normal: its time under a fault annotation or a fired thermal alert is
left out, and without either, its offset moves at most a step from the previous model's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.collectors.sim import FleetSim, SimParams, parse_fault
from fleetwatch.frame import Frame
from fleetwatch.models.artifact import load
from fleetwatch.models.thermal_health import ThermalHealth
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.simulate import fault_annotations
from fleetwatch.train import train

START = 1_763_800_000.0
H = 3600.0
PARAMS = SimParams(nodes=2, gpus=4, seed=9, interval_s=30.0, job_mean_s=1e9,
                   steady_load=True)
FAULTY = ("node-000", 0)
HEALTHY_H, TRAIN_H, JUDGE_H = 3, 12, 3  # healthy, then the fault to the end


@pytest.fixture(scope="module")
def history() -> tuple[list[list[Frame]], FleetSim]:
    # Strong enough to hold the die at the slow fault's plateau (79 °C) within the hour:
    # most of the training range is the fault, steady, as a nightly retrain would see it.
    fault = parse_fault(f"cooling_slow:node-000/0@{HEALTHY_H}h+30hx20~drift")
    sim = FleetSim(PARAMS, START, [fault])
    ticks = []
    while sim.ts < START + (TRAIN_H + JUDGE_H) * H - 1:
        sim.step()
        ticks.append(sim.frames())
    return ticks, sim


def _store(tmp: Path, ticks: list[list[Frame]], end: float) -> SqliteStore:
    store = SqliteStore(tmp / "history.db")
    for frames in ticks:
        if frames[0].ts < end:
            store.write(frames)
    store.maintain(int((end + 600) * 1000))
    return store


def _flagged(models_dir: Path, ticks: list[list[Frame]]) -> set[tuple[str, int | None]]:
    """The GPUs thermal health flags in the judged hours with the newest model."""
    [path] = sorted(models_dir.glob("*.fwm"))[-1:]
    health = ThermalHealth(load(path).thermal)
    judged = [f for t in ticks if t[0].ts >= START + TRAIN_H * H for f in t]
    found = []
    for i in range(0, len(judged), 40):
        found.extend(health.update(judged[i:i + 40]))
    return {(f.node, f.gpu) for f in found if f.rule == "thermal_health"}


def test_a_fault_annotation_keeps_the_fault_out_of_training(
        history: tuple[list[list[Frame]], FleetSim], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ticks, sim = history
    end = START + TRAIN_H * H
    store = _store(tmp_path, ticks, end)
    store.write_annotations(fault_annotations(sim.ground_truth, PARAMS.cluster))
    _, meta = train(store, START, end, tmp_path / "models", progress=print)
    store.close()
    key = f"{PARAMS.cluster}/node-000/gpu0"
    assert meta["left_out_h"] == {key: pytest.approx(TRAIN_H - HEALTHY_H, abs=0.1)}
    said = capsys.readouterr().out
    assert f"left out (known not normal): {key}: 9.0 h (fault annotation" in said
    # Every GPU-minute read is counted; the thermal fit takes every other one of those kept.
    assert "8 GPUs, 5,760 GPU-minutes so far" in said
    assert "fitting thermal health on 2,610 GPU-minutes (every other minute of the 5,219 " \
        "kept)" in said
    assert FAULTY in _flagged(tmp_path / "models", ticks)


def test_a_fired_thermal_alert_keeps_its_time_out_of_training(
        history: tuple[list[list[Frame]], FleetSim], tmp_path: Path) -> None:
    ticks, _ = history
    end = START + TRAIN_H * H
    store = _store(tmp_path, ticks, end)
    opened = START + (HEALTHY_H + 1) * H  # an hour of margin before it covers the onset
    store.write_alerts([Alert("a1", "gpu_hot_vs_peers", "warning", PARAMS.cluster, "rack-00",
                              "node-000", "gpu0", "firing", opened, end, 5.0, "hot",
                              fired_ts=opened + 60)])
    _, meta = train(store, START, end, tmp_path / "models")
    store.close()
    assert meta["left_out_h"] == {f"{PARAMS.cluster}/node-000/gpu0": pytest.approx(9.0, abs=0.1)}
    assert FAULTY in _flagged(tmp_path / "models", ticks)


def test_without_any_record_of_the_fault_the_retrained_model_still_flags_it(
        history: tuple[list[list[Frame]], FleetSim], tmp_path: Path) -> None:
    ticks, _ = history
    store = _store(tmp_path, ticks, START + TRAIN_H * H)
    # The model in use was trained on the healthy hours; the retrain sees the fault with
    # no alert and no annotation in the store: the offset, robust and shrunk toward the
    # node's and capped a step from the previous one, does not learn the fault.
    train(store, START, START + HEALTHY_H * H, tmp_path / "models")
    before = load(sorted((tmp_path / "models").glob("*.fwm"))[-1]).thermal.offsets
    _, meta = train(store, START, START + TRAIN_H * H, tmp_path / "models")
    store.close()
    after = load(sorted((tmp_path / "models").glob("*.fwm"))[-1]).thermal.offsets
    key = f"{PARAMS.cluster}/node-000/gpu0"
    assert meta["left_out_h"] == {}
    assert abs(after[key] - before[key]) <= max(2 * meta["thermal_spread_c"], 0.5) + 1e-6
    assert FAULTY in _flagged(tmp_path / "models", ticks)
