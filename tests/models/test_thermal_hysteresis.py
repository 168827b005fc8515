"""Thermal health: a flagged GPU stays flagged while it hovers around the threshold."""

from __future__ import annotations

import numpy as np

from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.models.thermal_health import ThermalHealth, ThermalModel


class Constant:
    """An 'estimator' that expects 50 °C whatever the load: the residual is temp - 50."""

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return np.full(len(rows), 50.0)


def frame(ts: float, temp: float) -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "A100", {
        "gpu_temp_c": temp if i == 0 else 50.0, "gpu_power_w": 300.0}) for i in range(2))
    return Frame("c", "r", "n", ts, gpus, HostReading({}), 0)


def test_a_flagged_gpu_is_held_until_half_the_thresholds() -> None:
    model = ThermalModel(Constant(), "constant", {}, {"c/n/gpu0": 0.0, "c/n/gpu1": 0.0}, 1.0)
    health = ThermalHealth(model, half_life_s=1.0, min_excess_c=5.0, min_score=4.0,
                           warmup_s=0.0)
    ts = 0.0

    def flagged(temp: float) -> bool:
        nonlocal ts
        found = []
        for _ in range(20):  # long enough for the 1 s half-life to settle
            ts += 15.0
            found = health.update([frame(ts, temp)])
        return [(f.gpu) for f in found] == [0]

    assert not flagged(54.0)   # under the threshold: never flagged
    assert flagged(56.0)       # 6 °C over: flagged
    assert flagged(54.0)       # hovers at 4 °C: held (over half of 5 °C)
    assert not flagged(52.0)   # 2 °C: under half, cleared
    assert not flagged(54.0)   # 4 °C again: not flagged anew
