"""The integrator on the cases user testers found: a GPU the node stops listing, a counter
that stands still while the board draws power, a GPU several jobs share, and a node's CPU
energy when several jobs share the node. Hand-made frames, exact kWh, read back from a real
SQLite store."""

from __future__ import annotations

import logging

import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = 1_654_041_600  # 2022-06-01 00:00 UTC
H = 3600
P = 300.0
KWH = 3.6e6


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


def gpu(i: int, ts: float, *, job: str | None = "j1", user: str = "u1", team: str = "t1",
        counter: float | None = None, uuid: str | None = None, power: float = P) -> GpuReading:
    m = {"gpu_sm_active_ratio": 0.5, "gpu_power_w": power,
         "gpu_energy_j": power * (ts - T0) + 1e6 if counter is None else counter}
    return GpuReading(i, uuid or f"GPU-{i}", "NVIDIA A100-SXM4-80GB", m, job,
                      info={"user": user, "team": team})


def fr(ts: float, gpus: list[GpuReading], cpu_w: float | None = None) -> Frame:
    host = {"host_cpu_power_w": cpu_w} if cpu_w is not None else {}
    return Frame("c", "r0", "n0", float(ts), tuple(gpus), HostReading(host))


def feed(store: SqliteStore, frames: list[Frame], batch: int = 40,
         settings: EnergySettings | None = None) -> EnergyIntegrator:
    ei = EnergyIntegrator(store, settings or EnergySettings())
    for i in range(0, len(frames), batch):
        ei.observe(frames[i:i + batch])
    return ei


def rows(store: SqliteStore, **match: str) -> list:
    return [r for r in store.energy(0, 1e12) if all(getattr(r, k) == v for k, v in match.items())]


def kwh(store: SqliteStore, **match: str) -> float:
    return sum(r.energy_j for r in rows(store, **match)) / KWH


def total(store: SqliteStore, field: str, **match: str) -> float:
    return sum(getattr(r, field) for r in rows(store, **match))


# -- a GPU the node stops listing (removed, replaced) --------------------------------------

def swapped_board() -> list[Frame]:
    """8 GPUs, 12 h at 15 s; gpu7 is not listed 04:30..09:30 (the board is out), then a
    new board (new UUID, counter from 0) is listed at index 7."""
    frames = []
    for t in range(T0, T0 + 12 * H + 1, 15):
        gs = [gpu(i, t) for i in range(7)]
        if t < T0 + 4 * H + 1800:
            gs.append(gpu(7, t))
        elif t >= T0 + 9 * H + 1800:
            gs.append(gpu(7, t, counter=P * (t - T0 - 9 * H - 1800), uuid="GPU-NEW"))
        frames.append(fr(t, gs))
    return frames


def test_a_board_out_for_hours_keeps_its_last_hour_and_is_not_missing_time(store):
    feed(store, swapped_board())
    g7 = {r.bucket_ts: r for r in rows(store, device="gpu7")}
    # 04:00: the samples 04:00:15..04:29:45 of the old board, 119 x 15 s at 300 W.
    assert g7[T0 + 4 * H].energy_j == pytest.approx(P * 1785)
    assert g7[T0 + 4 * H].seconds == pytest.approx(1785)
    # Old board: 00:00:00..04:29:45; new board: 09:30:00..12:00:00, from its first sample.
    measured = 4 * H + 1785 + 2.5 * H
    assert kwh(store, device="gpu7") == pytest.approx(P * measured / KWH)   # 2.09875 kWh
    assert total(store, "seconds", device="gpu7") == pytest.approx(measured)
    # The board was not there: its absence is not a measuring gap.
    assert total(store, "missing_s") == 0.0
    # No hour of the absence has a row for gpu7.
    assert not [b for b in g7 if T0 + 5 * H <= b < T0 + 9 * H]
    assert kwh(store, device="gpu0") == pytest.approx(P * 12 * H / KWH)


def test_a_board_out_for_hours_across_a_processor_restart(tmp_path):
    # The processor restarts while the board is out: the watermarks come from the store.
    frames = swapped_board()
    path = tmp_path / "s.db"
    first = SqliteStore(path)
    feed(first, frames[:4 * 240])          # to 06:59:45
    first.close()
    second = SqliteStore(path)
    feed(second, frames[4 * 240:])
    assert kwh(second, device="gpu7") == pytest.approx(P * (4 * H + 1785 + 2.5 * H) / KWH)
    assert total(second, "missing_s") == 0.0
    second.close()


def test_a_silent_node_without_energy_counters_is_still_missing_time_for_every_gpu(store):
    def uncounted(i: int, t: float) -> GpuReading:
        g = gpu(i, t)
        return GpuReading(i, g.uuid, g.model, {"gpu_power_w": P}, g.job, info=g.info)

    frames = [fr(t, [uncounted(0, t), uncounted(1, t)]) for t in range(T0, T0 + H + 1, 15)]
    frames += [fr(t, [uncounted(0, t), uncounted(1, t)])
               for t in range(T0 + 3 * H, T0 + 4 * H + 1, 15)]
    feed(store, frames)
    assert total(store, "missing_s", device="gpu0") == pytest.approx(2 * H)
    assert total(store, "missing_s", device="gpu1") == pytest.approx(2 * H)


def test_a_silent_node_whose_counters_ran_on_has_that_energy_measured(store):
    # No power limit in the frames: the part's TDP (an A100 SXM4's 400 W) bounds the step.
    frames = [fr(t, [gpu(0, t), gpu(1, t)]) for t in range(T0, T0 + H + 1, 15)]
    frames += [fr(t, [gpu(0, t), gpu(1, t)]) for t in range(T0 + 3 * H, T0 + 4 * H + 1, 15)]
    feed(store, frames)
    for dev in ("gpu0", "gpu1"):
        assert total(store, "missing_s", device=dev) == 0.0
        assert total(store, "gap_s", device=dev) == pytest.approx(2 * H)
        assert kwh(store, device=dev) == pytest.approx(P * 4 * H / KWH)
        # Spread evenly over the gap's two hours, to the job that held it at both ends.
        gap = [r for r in store.energy(0, 5e9) if r.device == dev and r.gap_j]
        assert sorted((r.bucket_ts, r.job, r.gap_j) for r in gap) == [
            (T0 + H, "j1", pytest.approx(P * H)), (T0 + 2 * H, "j1", pytest.approx(P * H))]


def test_a_gpu_unlisted_for_less_than_max_gap_is_bridged_by_its_counter(store):
    # One frame without gpu1: the counter's 30 s step covers it, nothing is lost.
    frames = [fr(t, [gpu(0, t)] + ([] if t == T0 + 300 else [gpu(1, t)]))
              for t in range(T0, T0 + 601, 15)]
    feed(store, frames)
    assert kwh(store, device="gpu1") == pytest.approx(P * 600 / KWH)
    assert total(store, "missing_s") == 0.0


def test_a_lost_gpu_the_node_still_lists_is_missing_time(store):
    frames = []
    for t in range(T0, T0 + 601, 15):
        lost = T0 + 150 <= t < T0 + 450
        g1 = (GpuReading(1, "GPU-1", "m", {}, None, state="lost") if lost else gpu(1, t))
        frames.append(fr(t, [gpu(0, t), g1]))
    feed(store, frames)
    assert total(store, "missing_s", device="gpu1") == pytest.approx(300)  # 20 samples


# -- a counter that stands still while the board draws power -------------------------------

def stale_counter() -> list[Frame]:
    """gpu0's counter holds one value 01:00..02:00 while power reads 300 W, then resumes at
    its true value (the tester's scenario)."""
    out = []
    for t in range(T0, T0 + 3 * H + 1, 15):
        c = P * H + 1e6 if T0 + H <= t < T0 + 2 * H else None
        out.append(fr(t, [gpu(0, t, counter=c), gpu(1, t)]))
    return out


def test_a_frozen_counter_uses_power_and_its_catch_up_is_not_counted_twice(store, caplog):
    with caplog.at_level(logging.WARNING, logger="fleetwatch.pipeline.energy"):
        ei = feed(store, stale_counter())
    by_hour = {r.bucket_ts: r.energy_j / KWH for r in rows(store, device="gpu0")}
    assert by_hour == {T0: pytest.approx(0.3), T0 + H: pytest.approx(0.3),
                       T0 + 2 * H: pytest.approx(0.3)}
    assert kwh(store, device="gpu0") == pytest.approx(0.9)
    assert kwh(store, device="gpu1") == pytest.approx(0.9)
    # Flagged: counted, and said once for the node.
    assert ei.stale_counter_intervals == 239
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "gpu0" in warned[0] and "gpu_energy_j" in warned[0]


def test_a_frozen_counter_across_a_processor_restart_is_not_counted_twice(tmp_path):
    frames = stale_counter()
    path = tmp_path / "s.db"
    first = SqliteStore(path)
    feed(first, frames[:300])              # restart inside the frozen hour
    first.close()
    second = SqliteStore(path)
    feed(second, frames[300:])
    assert kwh(second, device="gpu0") == pytest.approx(0.9)
    second.close()


def test_a_counter_that_updates_every_other_sample_is_exact(store):
    # A DCGM field watched every 30 s, read every 15 s: 0, 2x, 0, 2x... The power samples
    # fill the still steps; each catch-up pays them back: the counter's total, exactly.
    frames = []
    for k, t in enumerate(range(T0, T0 + H + 1, 15)):
        c = P * (t - T0 - (15 if k % 2 else 0)) + 1e6
        frames.append(fr(t, [gpu(0, t, counter=c)]))
    feed(store, frames)
    assert kwh(store, device="gpu0") == pytest.approx(P * H / KWH)


def test_an_idle_gpu_counter_is_not_called_frozen(store):
    # 50 W idle: the counter's steps (750 J) are far above the floor; all counter, no flag.
    frames = [fr(t, [gpu(0, t, power=50.0, job=None)]) for t in range(T0, T0 + H + 1, 15)]
    ei = feed(store, frames)
    assert kwh(store) == pytest.approx(50 * H / KWH)
    assert ei.stale_counter_intervals == 0


def test_a_counter_slower_than_a_sudden_drop_in_power_is_believed(store):
    # A job ends: power 400 W -> 60 W right after a sample; the counter's step (60 W x 15 s
    # plus a second at 400 W) is under the trapezoid but a real step: the counter is kept.
    frames, c = [], 1e6
    for k in range(5):
        p = 400.0 if k < 2 else 60.0
        if k:
            c += (400.0 * 15) if k < 2 else (400.0 + 60.0 * 14 if k == 2 else 60.0 * 15)
        frames.append(fr(T0 + 15 * k, [gpu(0, T0 + 15 * k, counter=c, power=p)]))
    ei = feed(store, frames)
    assert kwh(store) == pytest.approx((c - 1e6) / KWH)
    assert ei.stale_counter_intervals == 0


# -- a GPU shared by several jobs (MPS, time slicing) ---------------------------------------

def test_a_shared_gpu_is_split_equally_among_its_jobs_and_their_users(store):
    frames = []
    for t in range(T0, T0 + 2 * H + 1, 15):
        frames.append(fr(t, [gpu(0, t, job="111,222", user="alice,bob", team="ta,tb"),
                             gpu(1, t, job="111", user="alice", team="ta")]))
    feed(store, frames)
    assert kwh(store, job="111") == pytest.approx(0.6 + 0.3)
    assert kwh(store, job="222") == pytest.approx(0.3)
    assert kwh(store, user="alice") == pytest.approx(0.9)
    assert kwh(store, user="bob") == pytest.approx(0.3)
    assert kwh(store, team="tb") == pytest.approx(0.3)
    assert not [r for r in rows(store) if "," in r.job + r.user + r.team]
    # GPU-hours are split too: the shared GPU's 2 h are 1 h each.
    assert total(store, "seconds", job="222") == pytest.approx(H)
    assert total(store, "seconds", device="gpu0") == pytest.approx(2 * H)


def test_a_shared_gpu_without_paired_users_splits_users_evenly(store):
    # Three jobs, two users that cannot be paired with them: jobs a third each, users half.
    frames = [fr(t, [gpu(0, t, job="1,2,3", user="alice,bob", team="t")])
              for t in range(T0, T0 + H + 1, 15)]
    feed(store, frames)
    for j in "123":
        assert kwh(store, job=j) == pytest.approx(0.1)
    assert kwh(store, user="alice") == pytest.approx(0.15)
    assert kwh(store, user="bob") == pytest.approx(0.15)
    assert kwh(store, team="t") == pytest.approx(0.3)


# -- a node's CPU and static energy when several jobs share it -------------------------------

def test_node_energy_is_split_by_the_jobs_gpu_energy(store):
    # gpu0: job A at 300 W, gpu1: job B at 100 W, gpu2: no job at 50 W; CPU 200 W, rest 100 W.
    frames = [fr(t, [gpu(0, t, job="A", user="alice", team="ta"),
                     gpu(1, t, job="B", user="bob", team="tb", power=100.0),
                     gpu(2, t, job=None, user="", team="", power=50.0)], cpu_w=200.0)
              for t in range(T0, T0 + 2 * H + 1, 15)]
    feed(store, frames, settings=EnergySettings(node_static_w=100.0))
    node_kwh = (200.0 + 100.0) * 2 * H / KWH   # 0.6 kWh of CPU and rest
    assert kwh(store, device="cpu") == pytest.approx(0.4)
    assert kwh(store, job="A") == pytest.approx(0.6 + node_kwh * 300 / 450)
    assert kwh(store, job="B") == pytest.approx(0.2 + node_kwh * 100 / 450)
    assert kwh(store, job="") == pytest.approx(0.1 + node_kwh * 50 / 450)
    assert kwh(store, user="alice", device="cpu") == pytest.approx(0.4 * 300 / 450)
    assert total(store, "seconds", device="rest") == pytest.approx(2 * H)


def test_the_testers_two_jobs_pay_the_same(store):
    frames = [fr(t, [gpu(0, t, job="A", user="alice", team="ta"),
                     gpu(1, t, job="B", user="bob", team="tb")], cpu_w=200.0)
              for t in range(T0, T0 + 2 * H + 1, 15)]
    feed(store, frames)
    assert kwh(store, job="A") == pytest.approx(0.8)
    assert kwh(store, job="B") == pytest.approx(0.8)


def test_a_shared_gpus_node_energy_follows_its_split(store):
    frames = [fr(t, [gpu(0, t, job="111,222", user="alice,bob")], cpu_w=100.0)
              for t in range(T0, T0 + H + 1, 15)]
    feed(store, frames)
    assert kwh(store, job="111", device="cpu") == pytest.approx(0.05)
    assert kwh(store, user="bob") == pytest.approx(0.15 + 0.05)
