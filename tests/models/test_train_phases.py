"""Training says which phases of work the fleet anomaly model has no model for."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.history import FrameDays
from fleetwatch.models.anomaly import FEATURES, MIN_WINDOWS, PHASE_NAMES, PHASES, fit_anomaly
from fleetwatch.train import train_frames

START = 1_763_800_020.0
PARAMS = SimParams(nodes=4, gpus=4, nodes_per_rack=2, seed=5, interval_s=30.0,
                   steady_load=True)


def windows(sm: float, n: int, seed: int = 0) -> np.ndarray:
    """``n`` steady ten-minute windows at SM activity ``sm``, the other features noisy."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(50.0, 2.0, (n, len(FEATURES)))
    rows[:, FEATURES.index("sm_mean")] = sm
    rows[:, FEATURES.index("sm_std")] = 0.01
    return rows


def test_a_phase_with_too_little_history_has_no_model_and_is_named() -> None:
    assert len(PHASE_NAMES) == len(PHASES) + 1
    heavy = windows(0.9, MIN_WINDOWS)
    light = windows(0.2, MIN_WINDOWS - 1, seed=1)
    model = fit_anomaly(np.concatenate([heavy, light]))
    assert set(model.windows) == {3}
    assert model.missing() == ["idle", "light", "medium"]
    assert fit_anomaly(windows(0.2, MIN_WINDOWS, seed=2)).missing() == ["idle", "medium",
                                                                          "heavy"]
    assert fit_anomaly(np.zeros((0, len(FEATURES)))).missing() == list(PHASE_NAMES)


def test_a_short_training_says_which_phases_have_no_model(tmp_path: Path) -> None:
    # An hour of a fleet held in one kind of work: a few dozen windows, at most one phase.
    end = START + 3600
    sim = FleetSim(PARAMS, START)
    history = FrameDays(START, end)
    while sim.ts < end - 1:
        sim.step()
        history.add(sim.frames())
    path, meta = train_frames(history, START, end, tmp_path)
    have = {PHASE_NAMES[int(p)] for p in meta["anomaly_phases"]}
    missing = meta["anomaly_phases_missing"]
    assert missing and set(missing) == set(PHASE_NAMES) - have
    assert missing == [p for p in PHASE_NAMES if p in missing]  # in the order of work
    # The file's metadata line says it too, for whoever reads the file later.
    assert json.loads(path.read_bytes().split(b"\n", 1)[0])["anomaly_phases_missing"] == missing
