"""The array path gives the processor's rows: same samples, both integrators, same ledger."""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.energy_arrays import integrate_arrays
from fleetwatch.pipeline.energy_settings import EnergySettings

T0 = 1_651_795_200.0


@pytest.mark.parametrize("aligned", [False, True])
def test_array_and_frame_paths_give_the_same_rows(aligned):
    rng = np.random.default_rng(7)
    n_t, n_g = 600, 5
    if aligned:  # 15 s samples on the hour: no interval crosses one (the run-length path)
        ts = T0 + 15.0 * np.arange(n_t)
    else:  # jitter, one 10-minute gap, times not aligned to the hour
        steps = np.full(n_t, 15.0) + rng.uniform(-2, 2, n_t)
        steps[300] = 600.0
        ts = T0 + 7.0 + np.cumsum(steps)
    power = rng.uniform(50, 500, (n_t, n_g))
    power[rng.random((n_t, n_g)) < 0.03] = np.nan          # samples without power
    counter = np.cumsum(power * 15.0, axis=0) + 1e6
    counter[:, 0] = np.nan                                  # a GPU without the counter
    counter[400:, 1] -= counter[399, 1]                     # a driver reload on GPU 1
    counter[200, 2] += 1e9                                  # an implausible jump on GPU 2
    idle = rng.random((n_t, n_g)) < 0.3
    owner = rng.integers(0, 3, (n_t, n_g))
    owners = [("", "", ""), ("j1", "alice", "ml"), ("j2", "bob", "")]
    devices = [("c", "r", "n", f"gpu{g}") for g in range(n_g)]
    settings = EnergySettings(max_gap_s=60.0, tdp_w=400.0)

    rows = integrate_arrays(ts, power, counter, idle, owner, devices, owners, settings)

    frames = []
    for i, t in enumerate(ts.tolist()):
        gpus = []
        for g in range(n_g):
            m = {"gpu_sm_active_ratio": 0.0 if idle[i, g] else 0.9}
            if not np.isnan(power[i, g]):
                m["gpu_power_w"] = float(power[i, g])
            if not np.isnan(counter[i, g]):
                m["gpu_energy_j"] = float(counter[i, g])
            job, user, team = owners[owner[i, g]]
            gpus.append(GpuReading(g, f"u{g}", "m", m, job or None,
                                   info={"user": user, "team": team}))
        frames.append(Frame("c", "r", "n", t, tuple(gpus)))
    _, expected, _ = EnergyIntegrator(None, settings).integrate(frames)

    assert len(rows) == len(expected)
    for a, b in zip(sorted(rows), sorted(expected)):
        assert a[:8] == b[:8]
        assert a[8:] == pytest.approx(b[8:], rel=1e-9, abs=1e-6)
    # The gap, and samples without power, are missing time.
    assert sum(r.missing_s for r in rows) > (600 if not aligned else 100)


def test_each_gpu_is_judged_over_its_own_tdp() -> None:
    ts = np.arange(5) * 15.0 + 1_651_795_200.0
    power = np.full((5, 2), 500.0)                       # an A100 and an H100 at 500 W
    rows = integrate_arrays(ts, power, None, np.zeros((5, 2), bool), np.zeros((5, 2), int),
                            [("c", "r", "n", "gpu0"), ("c", "r", "n", "gpu1")], [("", "", "")],
                            tdp=np.array([400.0, 700.0]))
    over = {r.device: r.over_tdp_s for r in rows}
    assert over == {"gpu0": 60.0, "gpu1": 0.0}
