"""The simulated fleet against what real fleets show, healthy cases that must not
alarm, and the labelled schedule generator.

References (not this code's own numbers): the A100-SXM4-80GB ``nvidia-smi -q -x``
capture in ``shared/data/gpu_telemetry`` (idle: 67 W, die 27 °C, HBM 44 °C;
500 W limit; max operating 85 °C, slowdown 89 °C) and the Acme study
(NSDI'24) of an LLM fleet: idle GPUs draw ~60 W, many GPUs at full
"utilization" draw ~100 W in communication- and input-bound phases, and SM
activity spreads over the whole range.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.collectors.sim import KINDS, SPECS, FleetSim, SimParams, random_schedule
from fleetwatch.models.rules import GpuTemperatureLimit

START = 1_763_800_000.0


@pytest.fixture(scope="module")
def samples() -> dict[str, np.ndarray]:
    """Twelve hours of 512 GPUs every minute, read from the frames (every 5th)."""
    sim = FleetSim(SimParams(nodes=64, gpus=8, nodes_per_rack=4, seed=21, interval_s=60.0),
                   START)
    cols: dict[str, list[float]] = {k: [] for k in ("power", "sm", "util", "temp", "mem",
                                                    "busy", "flags")}
    for k in range(12 * 60):
        sim.step()
        if k < 60 or k % 5:
            continue
        for f in sim.frames():
            for g in f.gpus:
                m = g.metrics
                cols["power"].append(m["gpu_power_w"])
                cols["sm"].append(m["gpu_sm_active_ratio"])
                cols["util"].append(m["gpu_util_pct"])
                cols["temp"].append(m["gpu_temp_c"])
                cols["mem"].append(m["gpu_mem_temp_c"])
                cols["busy"].append(g.job is not None)
                cols["flags"].append(m["gpu_throttle_reasons"])
    return {k: np.array(v) for k, v in cols.items()}


def test_idle_gpus_look_like_the_real_idle_a100(samples: dict[str, np.ndarray]) -> None:
    idle = ~samples["busy"].astype(bool)
    assert idle.mean() > 0.05
    assert 55 <= np.median(samples["power"][idle]) <= 70        # capture 67 W, Acme ~60 W
    assert 22 <= np.median(samples["temp"][idle]) <= 34         # capture 27 °C
    assert 12 <= np.median(samples["mem"][idle] - samples["temp"][idle]) <= 21  # capture +17


def test_busy_gpus_show_the_broad_middle(samples: dict[str, np.ndarray]) -> None:
    busy = samples["busy"].astype(bool)
    power, util, sm = samples["power"][busy], samples["util"][busy], samples["sm"][busy]
    assert 0.15 <= (power < 150).mean() <= 0.5
    full = util >= 95
    assert ((power < 150) & full).sum() >= 0.1 * full.sum()   # "100% utilized" at ~100 W
    assert (power > 350).mean() >= 0.08                         # and heavy kernels near the limit
    hist = np.histogram(sm, bins=5, range=(0, 1))[0] / len(sm)
    assert hist.min() >= 0.04, hist                            # SM activity over the whole range
    assert samples["power"].max() <= 500.0


def test_hbm_runs_a_few_degrees_above_a_loaded_die(samples: dict[str, np.ndarray]) -> None:
    loaded = samples["power"] > 300
    diff = samples["mem"][loaded] - samples["temp"][loaded]
    assert 1 <= np.median(diff) <= 9
    assert np.percentile(diff, 95) <= 12


def test_a_healthy_fleet_stays_under_the_fixed_limits(samples: dict[str, np.ndarray]) -> None:
    assert samples["temp"].max() < 85      # the A100's max operating temperature
    thermal = (samples["flags"].astype(int) & 0x60) > 0
    assert thermal.mean() == 0


def test_hot_but_healthy_gpus_and_phase_swings_raise_nothing() -> None:
    params = SimParams(nodes=16, gpus=8, seed=2, hot_share=0.1, job_mean_s=5400)
    sim = FleetSim(params, START)
    hot = {(n, g) for n, g, _ in sim.hot_gpus}
    assert len(hot) >= 5
    rule = GpuTemperatureLimit()
    gap, swings, findings = [], 0, []
    last_power: dict[tuple[str, int], float] = {}
    for _ in range(4 * 240):
        sim.step()
        frames = sim.frames()
        findings += rule.update(frames)
        for f in frames:
            temps = sorted(g.metrics["gpu_temp_c"] for g in f.gpus)
            for g in f.gpus:
                key = (f.node, g.index)
                p = g.metrics["gpu_power_w"]
                swings += abs(p - last_power.get(key, p)) > 200
                last_power[key] = p
                assert not g.xids and g.state == "ok"
                assert g.metrics["gpu_ecc_dbe_volatile_total"] == 0
                if key in hot and g.metrics["gpu_power_w"] > 250:
                    gap.append(g.metrics["gpu_temp_c"] - temps[len(temps) // 2])
    assert findings == []
    assert swings > 50                       # loads do swing by hundreds of watts
    assert 2 <= float(np.median(gap)) <= 8   # the hot ones are hot, all their life


def test_schedule_covers_every_kind_and_mode_without_overlaps() -> None:
    params = SimParams(nodes=125, gpus=8, nodes_per_rack=4)
    faults = random_schedule(params, 86400.0, seed=3, per_kind=2)
    pairs = {(f.kind, f.resolved_mode) for f in faults}
    assert pairs == {(k, m) for k in KINDS for m in SPECS[k].modes}
    assert len(faults) == 2 * len(pairs)
    assert faults == random_schedule(params, 86400.0, seed=3, per_kind=2)
    assert faults != random_schedule(params, 86400.0, seed=4, per_kind=2)

    def nodes(f):  # every node a fault touches
        if f.rack is not None:
            r = int(f.rack.split("-")[1])
            return set(range(r * 4, r * 4 + 4))
        return {int(f.node.split("-")[1])}
    for i, a in enumerate(faults):
        assert a.start_s > 0 and a.start_s + a.duration_s <= 86400.0
        for b in faults[i + 1:]:
            if nodes(a) & nodes(b):
                assert (a.start_s + a.duration_s <= b.start_s
                        or b.start_s + b.duration_s <= a.start_s), (a, b)
    sim = FleetSim(params, START, faults)  # and the simulator takes it as it is
    assert len(sim.ground_truth) == len(faults)


def test_schedule_too_big_for_the_fleet_says_so() -> None:
    with pytest.raises(ValueError, match="use more nodes"):
        random_schedule(SimParams(nodes=2, gpus=8), 4 * 3600.0, per_kind=5)
    with pytest.raises(ValueError, match="unknown kind 'meteor'"):
        random_schedule(SimParams(), 86400.0, kinds=["meteor"])


def test_a_power_step_moves_the_die_as_it_moved_the_real_h100() -> None:
    """The real H100 (tests/data/recorded/h100_gemm_load.jsonl.gz) jumped 15 of its 34 °C
    within a second of a 72 -> 700 W step and took the rest with a ~23 s time constant.
    The simulated die, sampled every second, answers a job's power step the same way:
    about half at once, the rest over the next minute, none of it as a slow 45 s lag."""
    sim = FleetSim(SimParams(nodes=8, gpus=8, seed=3, interval_s=1.0, steady_load=True),
                   START)
    prev = None
    steps = []
    for _ in range(3 * 3600):
        sim.step()
        now = (sim.power.copy(), sim.temp.copy())
        if prev is not None:
            jump = now[0] - prev[0]
            for i, j in zip(*np.nonzero(jump > 250.0)):
                steps.append((i, j, jump[i, j], now[1][i, j] - prev[1][i, j], len(steps)))
        prev = now
        if len(steps) >= 5:
            break
    assert steps, "no job started in three simulated hours"
    for i, j, dp, dtemp, _ in steps:
        total = sim.r_th[i, j] * dp
        assert 0.35 * total <= dtemp <= 0.7 * total, (dp, dtemp, total)
