"""The energy integrator on known power profiles: exact joules, resets, gaps, replays."""

from __future__ import annotations

import pytest

from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore

from .helpers import frame

T0 = 1_651_795_200.0  # 2022-05-06 00:00 UTC, an hour boundary


def totals(store: SqliteStore, **match: str) -> dict[str, float]:
    rows = [r for r in store.energy(0, 1e12)
            if all(getattr(r, k) == v for k, v in match.items())]
    return {f: sum(getattr(r, f) for r in rows) for f in
            ("energy_j", "idle_j", "seconds", "idle_s", "missing_s", "over_tdp_s")}


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


def test_constant_power_gives_exact_joules(store):
    # 300 W for one hour, sampled every 15 s, no energy counter: 300 * 3600 J.
    ei = EnergyIntegrator(store)
    ei.observe([frame(T0 + 15 * i, {0: {"gpu_power_w": 300.0, "gpu_sm_active_ratio": 0.9}})
                for i in range(241)])
    t = totals(store)
    assert t["energy_j"] == pytest.approx(300.0 * 3600, rel=1e-12)
    assert t["seconds"] == pytest.approx(3600.0)
    assert t["idle_j"] == 0.0 and t["missing_s"] == 0.0


def test_ramp_is_integrated_as_a_trapezoid_and_split_at_the_hour():
    # Power rises linearly 100 W -> 200 W across 10:59:00..11:01:00: 150 W mean over 120 s,
    # split 60 s / 60 s across the hour, with each side's own mean (125 W and 175 W).
    ei = EnergyIntegrator(None, EnergySettings(max_gap_s=300))
    start = T0 + 3600 - 60
    _, rows, _ = ei.integrate([frame(start, {0: {"gpu_power_w": 100.0}}),
                               frame(start + 120, {0: {"gpu_power_w": 200.0}})])
    by_bucket = {r.bucket_ts: r.energy_j for r in rows}
    assert sum(by_bucket.values()) == pytest.approx(150.0 * 120)
    # One interval is split in proportion to time (the trapezoid's mean on both sides).
    assert by_bucket[int(T0)] == pytest.approx(150.0 * 60)
    assert by_bucket[int(T0 + 3600)] == pytest.approx(150.0 * 60)


def test_energy_counter_is_preferred_and_a_reset_does_not_double_count(store):
    # The counter says 400 W while the (sampled) power says 100 W: the counter wins.
    # Midway the driver reloads and the counter restarts near 0: that interval
    # falls back to the power samples, and nothing is counted twice.
    ei = EnergyIntegrator(store)
    frames, counter = [], 5e9
    for i in range(121):
        if i == 60:
            counter = 400.0 * 7  # restarted 7 s before this sample
        elif i:
            counter += 400.0 * 15
        frames.append(frame(T0 + 15 * i, {0: {"gpu_power_w": 100.0, "gpu_energy_j": counter}}))
    ei.observe(frames)
    t = totals(store)
    assert t["energy_j"] == pytest.approx(400.0 * 15 * 119 + 100.0 * 15)
    assert t["seconds"] == pytest.approx(1800.0)


def test_a_gap_is_reported_as_missing_not_filled(store):
    ei = EnergyIntegrator(store, EnergySettings(max_gap_s=60))
    frames = [frame(T0 + 15 * i, {0: {"gpu_power_w": 200.0}}) for i in range(5)]
    frames += [frame(T0 + 60 + 600 + 15 * i, {0: {"gpu_power_w": 200.0}}) for i in range(5)]
    ei.observe(frames)
    t = totals(store)
    assert t["missing_s"] == pytest.approx(600.0)
    assert t["seconds"] == pytest.approx(120.0)
    assert t["energy_j"] == pytest.approx(200.0 * 120)


def test_a_lost_gpu_counts_as_missing(store):
    ei = EnergyIntegrator(store)
    ei.observe([frame(T0, {0: {"gpu_power_w": 200.0}}), frame(T0 + 15, {0: {}}),
                frame(T0 + 30, {0: {"gpu_power_w": 200.0}})])
    t = totals(store)
    assert t["missing_s"] == pytest.approx(15.0)
    assert t["energy_j"] == pytest.approx(200.0 * 15)


def test_idle_and_over_tdp_are_counted_apart(store):
    ei = EnergyIntegrator(store, EnergySettings(tdp_w=400.0))
    frames = [frame(T0 + 15 * i, {0: {"gpu_power_w": 60.0, "gpu_sm_active_ratio": 0.0},
                                  1: {"gpu_power_w": 450.0, "gpu_sm_active_ratio": 0.95},
                                  2: {"gpu_power_w": 60.0, "gpu_util_pct": 0.0}},
                    job="j1", user="alice") for i in range(5)]
    ei.observe(frames)
    g0, g1, g2 = (totals(store, device=f"gpu{i}") for i in range(3))
    assert g0["idle_j"] == pytest.approx(60.0 * 60) and g0["idle_s"] == pytest.approx(60)
    assert g1["idle_j"] == 0.0 and g1["over_tdp_s"] == pytest.approx(60.0)
    # Without SM activity, a job's GPU at 0% utilization throughout is idle all the same.
    assert g2["idle_j"] == pytest.approx(60.0 * 60) and g2["idle_s"] == pytest.approx(60)
    assert totals(store, job="j1", user="alice")["energy_j"] == pytest.approx(570.0 * 60)


@pytest.mark.parametrize(("model", "power", "limit", "over"), [
    ("NVIDIA H100 80GB HBM3", 703.0, 700.0, False),   # at its cap: read noise, not over
    ("NVIDIA A100-SXM4-80GB", 500.0, 500.0, True),    # a 500 W limit on a 400 W part
    ("NVIDIA A100-SXM4-80GB", 405.0, 500.0, False),   # within 2% of 400 W
    ("NVIDIA H100 PCIe", 360.0, 350.0, True),
    ("Some GPU", 320.0, 300.0, True),                 # no rated TDP: its power limit
    ("Some GPU", 320.0, None, False),                 # neither: not judged
])
def test_time_over_tdp_is_judged_against_each_parts_own_tdp(store, model, power, limit,
                                                              over):
    m = {"gpu_power_w": power, **({"gpu_power_limit_w": limit} if limit else {})}
    EnergyIntegrator(store).observe([frame(T0 + 15 * i, {0: m}, model=model)
                                     for i in range(5)])
    assert totals(store)["over_tdp_s"] == (60.0 if over else 0.0)


@pytest.mark.parametrize(("model", "power", "default", "over"), [
    # The A100-SXM4-80GB capture (telegraf_a100-sxm4-v12.xml): default_power_limit 500 W.
    ("NVIDIA A100-SXM4-80GB", 500.0, 500.0, False),   # its own SKU's default: not over
    ("NVIDIA A100-SXM4-80GB", 520.0, 500.0, True),
    ("NVIDIA A100-SXM4-80GB", 420.0, 400.0, True),    # the 400 W SKU
    ("Some GPU", 320.0, 350.0, False),
])
def test_the_gpus_own_default_power_limit_is_its_tdp(store, model, power, default, over):
    """Where NVML reports the board's default power limit (its SKU's, whatever -pl set),
    that is the line; the parts table only where it reports none."""
    m = {"gpu_power_w": power, "gpu_power_limit_w": 500.0,
         "gpu_power_default_limit_w": default}
    EnergyIntegrator(store).observe([frame(T0 + 15 * i, {0: m}, model=model)
                                     for i in range(5)])
    assert totals(store)["over_tdp_s"] == (60.0 if over else 0.0)


def test_a_tdp_in_config_is_every_gpus(store):
    frames = [frame(T0 + 15 * i, {0: {"gpu_power_w": 650.0}}, model="NVIDIA H100 80GB HBM3")
              for i in range(5)]
    EnergyIntegrator(store, EnergySettings(tdp_w=600.0)).observe(frames)
    assert totals(store)["over_tdp_s"] == 60.0


def test_a_replayed_batch_adds_nothing_across_a_restart(tmp_path):
    path = tmp_path / "s.db"
    frames = [frame(T0 + 15 * i, {0: {"gpu_power_w": 250.0}}, job="j", user="u",
                    host={"host_cpu_power_w": 150.0}) for i in range(200)]
    settings = EnergySettings(node_static_w=500.0)
    first = SqliteStore(path)
    EnergyIntegrator(first, settings).observe(frames[:120])
    first.close()
    # A new processor (a crash, a rebalance) gets frames 100.. again: 100..119 are replays.
    second = SqliteStore(path)
    ei = EnergyIntegrator(second, settings)
    ei.observe(frames[100:150])
    ei.observe(frames[100:200])  # and once more, from memory this time
    span = 15.0 * 199
    assert totals(second, device="gpu0")["energy_j"] == pytest.approx(250.0 * span)
    assert totals(second, device="cpu")["energy_j"] == pytest.approx(150.0 * span)
    assert totals(second, device="rest")["energy_j"] == pytest.approx(500.0 * span)
    assert totals(second, device="rest", job="j")["seconds"] == pytest.approx(span)


def test_a_failed_write_leaves_the_state_as_it_was(tmp_path):
    class Flaky(SqliteStore):
        fail = False

        def write_energy(self, rows, states):
            if self.fail:
                raise StoreError("away")
            super().write_energy(rows, states)

    store = Flaky(tmp_path / "s.db")
    ei = EnergyIntegrator(store)
    frames = [frame(T0 + 15 * i, {0: {"gpu_power_w": 100.0}}) for i in range(10)]
    ei.observe(frames[:5])
    store.fail = True
    with pytest.raises(StoreError):
        ei.observe(frames[5:])
    store.fail = False
    ei.observe(frames[5:])  # the same batch again, once the store is back
    assert totals(store)["energy_j"] == pytest.approx(100.0 * 15 * 9)


def glitched_counter(limit: float | None, glitch_w: float = 2800.0) -> list:
    """A 400 W A100 at 300 W for 135 s (10 samples 15 s apart) whose counter steps once by
    ``glitch_w`` x 15 s: 9 x 4,500 J is right."""
    frames, counter = [], 1e6
    for i in range(10):
        if i:
            counter += (glitch_w if i == 5 else 300.0) * 15
        m = {"gpu_power_w": 300.0, "gpu_energy_j": counter,
             **({"gpu_power_limit_w": limit} if limit else {})}
        frames.append(frame(T0 + 15 * i, {0: m}, model="NVIDIA A100-SXM4-80GB"))
    return frames


def test_a_counter_step_beyond_the_power_limit_falls_back_to_the_power_samples(store):
    # 2,800 W is under the absolute cap (3 kW) but 7 x this GPU's enforced 400 W limit:
    # the interval takes the trapezoid of its power samples (4,500 J), not 42,000 J.
    EnergyIntegrator(store).observe(glitched_counter(limit=400.0))
    assert totals(store)["energy_j"] == pytest.approx(40_500.0)


def test_without_a_power_limit_the_absolute_cap_still_judges_the_counter():
    # No limit in the frame: only max_plausible_w is known, and 2,800 W is under it...
    _, rows, _ = EnergyIntegrator(None).integrate(glitched_counter(limit=None))
    assert sum(r.energy_j for r in rows) == pytest.approx(8 * 4_500.0 + 42_000.0)
    # ...while 3,200 W is over it.
    _, rows, _ = EnergyIntegrator(None).integrate(glitched_counter(None, glitch_w=3200.0))
    assert sum(r.energy_j for r in rows) == pytest.approx(40_500.0)


@pytest.mark.parametrize(("limit", "step_w", "expected_w"), [
    (400.0, 580.0, 580.0),   # under 1.5 x the limit: the counter is believed
    (400.0, 620.0, 300.0),   # over it: the power samples
    (4e5, 2900.0, 2900.0),   # a limit read in mW does not lift the absolute cap...
    (4e5, 3100.0, 300.0),    # ...which still refuses 3.1 kW
])
def test_the_bound_is_relative_to_the_limit_and_never_above_the_cap(limit, step_w,
                                                                    expected_w):
    _, rows, _ = EnergyIntegrator(None).integrate(glitched_counter(limit, glitch_w=step_w))
    assert sum(r.energy_j for r in rows) == pytest.approx(8 * 4_500.0 + expected_w * 15)


def test_an_agent_sampling_slower_than_max_gap_s_is_said_once_not_only_counted_missing(
        store, caplog):
    integ = EnergyIntegrator(store)   # max_gap_s 60 s; this node samples every 120 s
    with caplog.at_level("WARNING", logger="fleetwatch.pipeline.energy"):
        integ.observe([frame(120.0 * k, {0: {"gpu_power_w": 300.0}}) for k in range(6)])
        integ.observe([frame(120.0 * k, {0: {"gpu_power_w": 300.0}}) for k in range(6, 9)])
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "longer than energy.max_gap_s = 60 s" in warned[0]
    assert "agent.interval_s" in warned[0]
    assert integ.slow_nodes == {("c1", "n1")}
    assert totals(store)["missing_s"] == pytest.approx(8 * 120.0)   # and counted as missing


def test_one_outage_is_not_taken_for_a_slow_agent(store, caplog):
    integ = EnergyIntegrator(store)
    ts = [0, 15, 30, 400, 415, 430, 900, 915]   # two outages, each followed by 15 s samples
    with caplog.at_level("WARNING", logger="fleetwatch.pipeline.energy"):
        integ.observe([frame(t, {0: {"gpu_power_w": 300.0}}) for t in ts])
    assert caplog.records == [] and integ.slow_nodes == set()


def test_a_jobs_gpu_without_sm_activity_at_zero_utilization_is_idle(store):
    # An A100 without DCGM (no SM activity) held by a job for an hour, doing nothing.
    ei = EnergyIntegrator(store)
    ei.observe([frame(T0 + 15 * i, {3: {"gpu_power_w": 60.0, "gpu_util_pct": 0.0}},
                      job="1003", user="dave") for i in range(241)])
    t = totals(store, job="1003")
    assert t["idle_s"] == pytest.approx(3600.0) == t["seconds"]
    assert t["idle_j"] == pytest.approx(60.0 * 3600)


def test_one_zero_utilization_reading_is_a_stall_not_an_idle_interval(store):
    # NVML's utilization covers its last sample period (1 s at most), not the agent's 15 s:
    # a busy job whose GPU reads 0 once stalled for about a second, and counts no idle
    # interval; two zeros in a row bound an interval with no kernel at either end.
    utils = [100, 100, 0, 100, 100, 0, 0, 0, 100]
    ei = EnergyIntegrator(store)
    ei.observe([frame(T0 + 15 * i, {0: {"gpu_power_w": 300.0, "gpu_util_pct": float(u)}},
                      job="j") for i, u in enumerate(utils)])
    t = totals(store)
    assert t["seconds"] == pytest.approx(120.0)
    assert t["idle_s"] == pytest.approx(30.0)  # the intervals 0 -> 0 only


def test_after_a_restart_the_first_intervals_end_reading_decides(store):
    # The previous utilization is kept in memory only: a restarted processor has the
    # watermark from the store but not the reading, and the interval's end decides.
    def at(i: int, util: float):
        return frame(T0 + 15 * i, {0: {"gpu_power_w": 60.0, "gpu_util_pct": util}}, job="j")

    EnergyIntegrator(store).observe([at(0, 100.0), at(1, 100.0)])
    EnergyIntegrator(store).observe([at(2, 0.0), at(3, 0.0), at(4, 100.0)])
    t = totals(store)
    assert t["seconds"] == pytest.approx(60.0)
    assert t["idle_s"] == pytest.approx(30.0)  # (1, 2] by its end alone, then (2, 3]
