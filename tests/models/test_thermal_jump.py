"""gpu_warming_at_steady_power: a heat path that fails at once, against what power explains.

The series follow the two-node heat model of a real GPU (collectors/sim/hardware.py): the
die r_die x P above its heat sink within the second, the sink approaching air + r_sink x P
with time constant tau; a failed fan or pump adds resistance r_extra to the sink's path
(and so lengthens its time constant by as much). Readings in whole degrees, as NVML's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest

from fleetwatch.models.thermal import ThermalLimits
from tests.collectors.recorded_frames import read_recording
from tests.models.helpers import busy, node

LIM = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0}
RULE = "gpu_warming_at_steady_power"


def series(power: Callable[[float], float], every_s: float, until_s: float,
           fail_at_s: float | None = None, r_extra: float = 0.10, air: float = 22.0,
           noise_c: float = 0.0, seed: int = 0) -> list[tuple[float, float, float]]:
    """(ts, power, whole-degree die) of an A100-like GPU (0.047 + 0.053 °C/W, tau 23 s),
    integrated at 0.5 s and read every ``every_s``; its cooling fails at ``fail_at_s``."""
    rng = np.random.default_rng(seed)
    r_die, r_sink, tau, step = 0.047, 0.053, 23.0, 0.5
    sink = air + r_sink * power(0.0)
    out, t, next_read = [], 0.0, 0.0
    while t <= until_s:
        p = power(t)
        failed = fail_at_s is not None and t >= fail_at_s
        r = r_sink + (r_extra if failed else 0.0)
        level = air + r * p
        sink = level + (sink - level) * math.exp(-step / (tau * r / r_sink))
        if t >= next_read - 1e-9:
            out.append((t, p, float(round(sink + r_die * p + rng.normal(0.0, noise_c)))))
            next_read += every_s
        t += step
    return out


def findings(samples: list[tuple[float, float, float]]) -> list:
    d = ThermalLimits()
    return [f for ts, p, temp in samples
            for f in d.update([node(ts, [busy(temp, power=p, **LIM)])]) if f.rule == RULE]


def first_changed(failing: list, healthy: list) -> float:
    return next(a[0] for a, b in zip(failing, healthy) if a[2] != b[2])


def test_a_cooler_failing_under_load_alarms_on_the_first_sample_that_shows_it() -> None:
    """450 W, 15 s scrape: the first reading the failure changes is 4 °C or more up at
    steady power: critical on that very sample, long before any limit."""
    def load(t: float) -> float:
        return 450.0
    failing = series(load, 15.0, 600.0, fail_at_s=300.0 + 7.0)
    first = first_changed(failing, series(load, 15.0, 600.0))
    found = findings(failing)
    assert found and found[0].ts == first
    assert found[0].severity == "critical" and found[0].for_s == 0.0
    assert found[0].evidence["temp_c"] < 80.0 and found[0].evidence["climb_c"] >= 3.0


def test_at_a_one_second_scrape_it_alarms_within_ten_seconds_of_the_first_changed_reading(
        ) -> None:
    def load(t: float) -> float:
        return 400.0
    failing = series(load, 1.0, 400.0, fail_at_s=300.3, noise_c=0.3)
    first = first_changed(failing, series(load, 1.0, 400.0, noise_c=0.3))
    found = findings(failing)
    assert found and first <= found[0].ts <= first + 10.0


def test_job_phases_warming_a_healthy_gpu_do_not_alarm() -> None:
    """Compute, communication, input-bound and checkpoint phases: 450, 100, 200, 60 W,
    each a few minutes, power swinging +-40 W within a phase; the die jumps with power and
    its sink follows. At 1, 5 and 15 s scrapes: no alarm."""
    rng = np.random.default_rng(3)
    phases = [450.0, 100.0, 450.0, 200.0, 60.0, 450.0, 320.0, 450.0] * 3
    jitter = rng.uniform(-40.0, 40.0, 10_000)

    def load(t: float) -> float:
        base = phases[int(t // 170.0) % len(phases)]
        return max(50.0, base + (jitter[int(t // 3.0)] if base > 100 else 0.0))
    for every in (1.0, 5.0, 15.0):
        assert findings(series(load, every, 170.0 * len(phases), noise_c=0.3)) == []


def test_a_gpu_first_seen_while_it_warms_through_a_job_start_does_not_alarm() -> None:
    """Seen from its first second at 450 W, its sink still climbing from idle: the power's
    history that explains it is not known, so nothing is judged for two time constants."""
    sink0 = 22.0 + 0.053 * 60.0
    samples = [(t, 450.0, float(round(22.0 + 0.053 * 450.0 + 0.047 * 450.0
                                       + (sink0 - 22.0 - 0.053 * 450.0) * math.exp(-t / 23.0))))
               for t in range(0, 300, 5)]
    assert findings(samples) == []


def test_a_lightly_loaded_gpu_is_not_judged_on_one_whole_degree_step() -> None:
    """At 60 W a doubled heat path adds 6 °C in all and 1-2 °C in the first ten seconds:
    whole-degree steps like a healthy GPU's. Not within seconds (the peer and health rules
    see it over minutes); the rule still sees one when its next compute phase starts."""
    def load(t: float) -> float:
        return 60.0 if t < 600.0 else 450.0
    failing = series(load, 15.0, 900.0, fail_at_s=300.0)
    found = findings(failing)
    assert found and found[0].ts >= 600.0


def test_a_power_drop_taken_back_with_the_wrong_die_share_is_no_climb() -> None:
    """A real H100's die jumps 0.024 °C/W; die_c_per_w (0.035) takes back more than that,
    so the sink would read 6 °C up after a 700 W to 140 W drop: a span whose power moved
    more than STEP_W is not judged."""
    samples = [(float(t), 700.0 if t < 300 else 140.0,
                80.0 if t < 300 else 80.0 - 0.024 * 560.0) for t in range(0, 400, 15)]
    assert findings(samples) == []


@pytest.mark.parametrize("every", [1, 2, 5, 15])
def test_a_real_h100_through_load_and_idle_does_not_alarm(every: int) -> None:
    """The real H100 (tests/data/recorded: idle, 120 s at its 700 W cap, idle; and no
    kernel, copies, matrix products, a hung kernel), read at 1 to 15 s, after two minutes
    of its first reading (a settled history): no warming at steady power."""
    for name in ("recorded/h100_gemm_load.jsonl.gz", "recorded/h100_phases.jsonl.gz"):
        frames = [f for k, (_, f) in enumerate(read_recording(name)) if k % every == 0]
        first = frames[0]
        before = [dataclasses.replace(first, ts=first.ts - 120.0 + k)
                  for k in range(0, 120, every)]
        d = ThermalLimits()
        assert [x for f in before + frames for x in d.update([f]) if x.rule == RULE] == []
