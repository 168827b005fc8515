"""gpu_temp_rising on series built from the physics of a real GPU, read as NVML reads them.

The heat sink follows its level, inlet + R x power, with the 23 s time constant measured on
a real H100 (``collectors/sim/hardware.py``); the die sits 0.030 °C/W above it, and reads in
whole degrees with 0.4 °C of noise. The A100 numbers (R 0.075 °C/W, 420 W of compute, 95 W
while a checkpoint is written) put a healthy GPU at 79-83 °C in 35 °C inlet air, under its
89 °C slowdown: after every checkpoint it climbs 30 °C/min toward that level, no further.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fleetwatch.models.thermal import ThermalLimits, settling_left
from tests.models.helpers import busy, node

LIMITS = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0}
R_SINK, DIE_C_PER_W, TAU_S = 0.075, 0.030, 23.0


def series(step: int, inlet: float, power: Callable[[int], float], r_mult: Callable[[int], float],
           seconds: int, offset: float, seed: int, die_c_per_w: float = DIE_C_PER_W
           ) -> list[tuple[float, float, float]]:
    """(time, whole-degree die reading, power) every ``step`` s, the physics run each second."""
    rng = np.random.default_rng(seed)
    sink = inlet + R_SINK * r_mult(0) * power(0)
    out = []
    for t in range(seconds):
        p = power(t)
        sink += (inlet + R_SINK * r_mult(t) * p - sink) / TAU_S
        if t % step == step - 1:
            die = sink + die_c_per_w * p + offset + rng.normal(0.0, 0.4)
            out.append((float(t), float(round(die)), p))
    return out


def rising(samples: list[tuple[float, float, float]]) -> list:
    d = ThermalLimits()
    return [f for t, temp, p in samples for f in d.update([node(t, [busy(temp, p, **LIMITS)])])
            if f.rule == "gpu_temp_rising"]


@pytest.mark.parametrize("step", [5, 15])
def test_healthy_gpus_resuming_after_checkpoints_in_35_c_air_do_not_rise_alarm(step: int) -> None:
    """Two hours of a training job with a 90 s checkpoint every 30 min, in 35 °C inlet air
    (ASHRAE A2 allows it), on GPUs up to 3 °C warmer than the rest: no GPU passes 86 °C."""
    found = []
    for seed, offset in enumerate((0.0, 1.5, 3.0)):
        jitter = np.random.default_rng(seed).normal(1.0, 0.03, 7200 // 5 + 1)

        def power(t: int, jitter: np.ndarray = jitter) -> float:
            return 95.0 if t % 1800 < 90 else 420.0 * jitter[t // 5]

        samples = series(step, 35.0, power, lambda t: 1.0, 7200, offset, seed)
        assert max(temp for _, temp, _ in samples) <= 86.0
        found += rising(samples)
    assert found == [], [(f.ts, f.message) for f in found]


@pytest.mark.parametrize("step", [5, 15])
def test_a_cooling_failure_under_load_still_warns_before_slowdown(step: int) -> None:
    """At 420 W in 24 °C air (68 °C), the heat sink's resistance doubles (a pump or fan
    stops): the die heads for 100 °C. The warning comes before the reading reaches slowdown."""
    samples = series(step, 24.0, lambda t: 420.0, lambda t: 1.0 if t < 600 else 2.0, 900,
                     0.0, 1)
    reached = next(t for t, temp, _ in samples if temp >= LIMITS["gpu_slowdown_temp_c"])
    found = rising(samples)
    assert found and found[0].ts < reached
    assert found[0].evidence["heading_c"] >= LIMITS["gpu_slowdown_temp_c"]


@pytest.mark.parametrize("dt", [1.0, 5.0, 15.0])
def test_what_is_left_of_a_first_order_approach_comes_from_the_readings_lead(dt: float) -> None:
    """A reading approaching its level with time constant 23 s, averaged over 10 s: once the
    average has forgotten where it started, the lead of the reading over it gives what is
    left of the approach, at any interval."""
    q, w = np.exp(-dt / 23.0), -np.expm1(-dt / 10.0)
    x = m = 80.0 - 1000.0
    for k in range(1, 2000):
        x = 80.0 - 1000.0 * q ** k
        m += w * (x - m)
        if 80.0 - x < 5.0:
            break
    left = settling_left(np.array(x - m), np.array(dt), 10.0, 23.0)
    assert left == pytest.approx(80.0 - x, rel=0.02)


@pytest.mark.parametrize(("step", "offset"), [(5, 0.0), (15, 0.0), (15, 1.5)])
def test_a_healthy_gpu_in_a_hot_room_climbing_after_each_communication_phase_is_no_warning(
        step: int, offset: float) -> None:
    """32 °C inlet (ASHRAE A1's top), 2 min of communication at 150 W every 10 min, on a die
    that rises 0.047 °C/W over its sink (the simulated A100's; config says 0.035): after
    each phase the die jumps and climbs 26 °C/min toward 87-88 °C, never reaching its 89 °C
    slowdown; the projection overshoots to 89-91 °C just after the step: no warning."""
    jitter = np.random.default_rng(1).normal(1.0, 0.03, 7200 // 5 + 1)

    def power(t: int) -> float:
        return (150.0 if t % 600 < 120 else 420.0) * jitter[t // 5]

    samples = series(step, 32.0, power, lambda t: 1.0, 7200, offset, 1, die_c_per_w=0.047)
    assert max(temp for _, temp, _ in samples) < LIMITS["gpu_slowdown_temp_c"]
    found = rising(samples)
    assert found == [], [(f.ts, f.message) for f in found]


@pytest.mark.parametrize("step", [5, 15])
def test_a_failed_cooler_found_when_the_next_compute_phase_starts_still_warns(step: int) -> None:
    """The cooler failed while the GPU idled (95 W in 24 °C air: no sign); the next compute
    phase (420 W) sends the die toward 100 °C. The climb right after that power step is
    the failure's first sign: the warning comes before slowdown."""
    samples = series(step, 24.0, lambda t: 95.0 if t < 600 else 420.0, lambda t: 2.0, 900,
                     0.0, 1)
    reached = next(t for t, temp, _ in samples if temp >= LIMITS["gpu_slowdown_temp_c"])
    found = rising(samples)
    assert found and found[0].ts < reached
