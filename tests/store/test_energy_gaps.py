"""Energy NVML's counter measured across a silence longer than ``energy.max_gap_s``, on every
store backend: booked as measured (spread evenly over the gap's hours, kept apart in the
row) where the counter is sound across the gap, missing time where it is not; rows stored
before those fields existed read as 0."""

from __future__ import annotations

import sqlite3

import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.store.backends import Backend
from tests.store.helpers import cluster_name

T0 = 1_651_795_200  # 2022-05-06 00:00 UTC
W = 300.0           # each GPU draws this throughout, its counter with it
LIMIT = 400.0       # the enforced power limit


def frame(cluster: str, ts: float, counters: tuple[float, float], job: str = "7") -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "test", {
        "gpu_power_w": W, "gpu_energy_j": c, "gpu_power_limit_w": LIMIT}, job)
        for i, c in enumerate(counters))
    return Frame(cluster, "r1", "n1", ts, gpus, HostReading({}))


def run(backend: Backend, cluster: str, silence_s: float, after: tuple[float, float] | None,
        ) -> list[EnergyRow]:
    """10 min of frames every 10 s from 00:40, a silence of ``silence_s``, then 10 min more
    whose counters start at ``after`` (None: as the GPUs ran on at W throughout). The
    frames after the silence go to a new integrator (a processor restarted in it)."""
    before = [frame(cluster, T0 + 2400 + 10 * k, (1e6 + W * 10 * k,) * 2) for k in range(61)]
    end = before[-1].ts
    c0 = after or (1e6 + W * (end + silence_s - T0 - 2400),) * 2
    later = [frame(cluster, end + silence_s + 10 * k, (c0[0] + W * 10 * k, c0[1] + W * 10 * k))
             for k in range(61)]
    EnergyIntegrator(backend.store).observe(before)
    backend.settle()
    EnergyIntegrator(backend.store).observe(later)
    backend.settle()
    return backend.store.energy(T0, T0 + 6 * 3600, cluster=cluster)


def test_a_sound_counter_across_a_silence_is_booked_as_measured(backend: Backend) -> None:
    c = cluster_name()
    rows = run(backend, c, 3600.0, None)
    gpu = [r for r in rows if r.device.startswith("gpu")]
    span = 600 + 3600 + 600
    assert sum(r.energy_j for r in gpu) == pytest.approx(2 * W * span)
    assert sum(r.gap_j for r in gpu) == pytest.approx(2 * W * 3600)
    assert sum(r.gap_s for r in gpu) == pytest.approx(2 * 3600)
    assert sum(r.missing_s for r in gpu) == 0.0
    assert sum(r.seconds for r in gpu) == pytest.approx(2 * 1200)  # sampled time only
    # Spread evenly: the gap is 00:50-01:50, 10 min of it in hour 0, 50 in hour 1.
    by_hour = {h: sum(r.gap_j for r in gpu if r.bucket_ts == h) for h in (T0, T0 + 3600)}
    assert by_hour[T0] == pytest.approx(2 * W * 600)
    assert by_hour[T0 + 3600] == pytest.approx(2 * W * 3000)
    # Counted once per GPU where it ends, with its length. Who held the GPU at the start
    # is kept in memory only: the processor restarted in the silence books it to no job.
    assert sum(r.gaps for r in gpu) == pytest.approx(2.0)
    assert max(r.longest_gap_s for r in gpu) == pytest.approx(3600.0)
    assert {r.job for r in gpu if r.gap_j} == {""}
    assert {r.bucket_ts for r in gpu if r.gaps} == {T0 + 3600}


def test_a_counter_reset_in_the_silence_leaves_missing_time(backend: Backend) -> None:
    c = cluster_name()
    rows = [r for r in run(backend, c, 3600.0, (5e4, 5e4)) if r.device.startswith("gpu")]
    assert sum(r.gap_j + r.gaps + r.gap_s for r in rows) == 0.0
    assert sum(r.missing_s for r in rows) == pytest.approx(2 * 3600)
    assert sum(r.energy_j for r in rows) == pytest.approx(2 * W * 1200)


def test_a_counter_step_above_the_power_limit_leaves_missing_time(backend: Backend) -> None:
    c = cluster_name()
    # 1.2 x the limit over the hour: no board held at 400 W draws that.
    start = 1e6 + W * 600 + 1.2 * LIMIT * 3600
    rows = [r for r in run(backend, c, 3600.0, (start, start)) if r.device.startswith("gpu")]
    assert sum(r.gap_j for r in rows) == 0.0
    assert sum(r.missing_s for r in rows) == pytest.approx(2 * 3600)


def test_rows_without_the_gap_fields_read_as_0(backend: Backend) -> None:
    c = cluster_name()
    old = EnergyRow(T0, c, "r1", "n1", "gpu0", "", "", "", 10.0, 0.0, 15.0, 0.0, 30.0, 0.0)
    backend.store.write_energy([old], [])
    backend.settle()
    got = backend.store.energy(T0, T0 + 3600, cluster=c)
    assert got == [old] and got[0].gap_j == 0.0 and got[0].longest_gap_s == 0.0


OLD_ENERGY = """CREATE TABLE energy (
    bucket_ts INTEGER NOT NULL, cluster TEXT NOT NULL, rack TEXT NOT NULL, node TEXT NOT NULL,
    device TEXT NOT NULL, job TEXT NOT NULL, user TEXT NOT NULL, team TEXT NOT NULL,
    energy_j REAL NOT NULL, idle_j REAL NOT NULL, seconds REAL NOT NULL, idle_s REAL NOT NULL,
    missing_s REAL NOT NULL, over_tdp_s REAL NOT NULL,
    PRIMARY KEY (bucket_ts, cluster, node, device, job, user, team)) WITHOUT ROWID"""


def test_a_sqlite_ledger_made_before_the_gap_fields_is_read_and_written(tmp_path) -> None:
    path = tmp_path / "old.db"
    made = SqliteStore(path)
    made.energy(T0, T0 + 3600)  # a store with its tables; its ledger as the release before
    made.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE energy")
    conn.execute(OLD_ENERGY)
    conn.execute("INSERT INTO energy VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                 (T0, "c", "r1", "n1", "gpu0", "", "", "", 10.0, 0.0, 15.0, 0.0, 30.0, 0.0))
    conn.commit()
    conn.close()
    old = EnergyRow(T0, "c", "r1", "n1", "gpu0", "", "", "", 10.0, 0.0, 15.0, 0.0, 30.0, 0.0)
    reader = SqliteStore(path, read_only=True)
    assert reader.energy(T0, T0 + 3600) == [old]  # read-only: no column added, read as 0
    reader.close()
    store = SqliteStore(path)
    gap = old._replace(bucket_ts=T0 + 3600, gap_j=5.0, gap_s=60.0, gaps=1.0,
                       longest_gap_s=90.0)
    store.write_energy([gap], [])
    assert store.energy(T0, T0 + 7200) == [old, gap]
    store.close()
