"""A frozen (or slowly updated) energy counter across processor restarts: what power booked
while the counter stood still is owed back exactly once, whichever processor sees the
counter move (D3 of the r15 SRE test: a restart mid-step counted the catch-up twice).

A restart is a new ``EnergyIntegrator`` on the same store, as ``fleetwatch process`` after a
kill or a partition taken over. Truth is computed here from the profile, never from the
integrator: 300 W for 3,600 s is 0.3000 kWh."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable

import pytest

from fleetwatch.frame import Frame
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.store.ledger import DeviceState
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.store.conftest import influxdb  # noqa: F401 - the server fixture

from .helpers import frame
from .test_ledger_contract import cluster, ledger  # noqa: F401 - the three-backend fixture

T0 = 1_654_041_600  # 2022-06-01 00:00 UTC
P = 300.0
TRUTH_KWH = P * 3600 / 3.6e6


def slow_counter(t: int, every: int = 20, base: float = 1e6) -> float:
    """``gpu_energy_j`` of a board at P that the exporter refreshes every ``every`` s."""
    return base + P * (t // every * every)


def frames(counter: Callable[[int], float], *, limit_w: float = 700.0, c: str = "c1",
           step: int = 5, span: int = 3600) -> list[Frame]:
    return [frame(T0 + t, {0: {"gpu_power_w": P, "gpu_power_limit_w": limit_w,
                               "gpu_energy_j": counter(t), "gpu_sm_active_ratio": 0.5}},
                  cluster=c, job="j1", user="u1")
            for t in range(0, span + 1, step)]


def run(open_store: Callable[[], object], fs: list[Frame], restarts: Iterable[int],
        flush: Callable[[], None] = lambda: None) -> None:
    """One frame per batch; a fresh integrator (a restarted processor) at each restart."""
    restarts = set(restarts)
    integ = EnergyIntegrator(open_store(), EnergySettings())
    for f in fs:
        if int(f.ts - T0) in restarts:
            flush()
            integ = EnergyIntegrator(open_store(), EnergySettings())
        integ.observe([f])


def sqlite_kwh(path) -> tuple[float, float]:
    with sqlite3.connect(path) as conn:
        kwh, sec = conn.execute("SELECT sum(energy_j) / 3.6e6, sum(seconds) FROM energy "
                                "WHERE device = 'gpu0'").fetchone()
    return kwh, sec


@pytest.mark.parametrize("restarts", [
    pytest.param((), id="no-restart"),
    pytest.param((1210,), id="one-restart-mid-step"),
    pytest.param(range(65, 3600, 60), id="every-minute-after-an-update"),
    pytest.param(range(60, 3600, 60), id="every-minute-on-an-update"),
    pytest.param(range(70, 3600, 60), id="every-minute-mid-step"),
])
def test_a_counter_updated_less_often_than_read_is_exact_across_restarts(tmp_path, restarts):
    path = tmp_path / "s.db"
    run(lambda: SqliteStore(path), frames(slow_counter), restarts)
    kwh, sec = sqlite_kwh(path)
    assert round(kwh, 4) == round(TRUTH_KWH, 4) == 0.3
    assert kwh == pytest.approx(TRUTH_KWH, rel=1e-9)
    assert sec == pytest.approx(3600.0)


@pytest.mark.parametrize("restart_at", [None, 610, 900, 1200, 1750, 1800])
def test_a_long_freeze_is_exact_across_a_restart_inside_it(tmp_path, restart_at):
    # Frozen from 600 s to 1800 s (20 min), then the counter catches up to the truth. A
    # restart at 610 s owes only 1,500 J, which the catch-up's plausibility bound (1.5 x
    # 700 W x 5 s) would not catch were the debt forgotten; later ones owe more than it.
    def counter(t: int) -> float:
        return 1e6 + P * (600 if 600 <= t < 1800 else t)

    path = tmp_path / "s.db"
    run(lambda: SqliteStore(path), frames(counter), () if restart_at is None else (restart_at,))
    kwh, _ = sqlite_kwh(path)
    assert kwh == pytest.approx(TRUTH_KWH, rel=1e-9)


def test_a_driver_reload_after_a_restart_falls_back_to_power(tmp_path):
    # Frozen counter, a restart mid-step (owing 1,500 J), then at 1,215 s the driver
    # reloads: the counter restarts near 0 and counts on from there. The interval of the
    # reset takes the power samples; the owed energy is not paid back by a counter that
    # no longer holds it, and nothing is counted twice.
    def counter(t: int) -> float:
        return slow_counter(t) if t < 1215 else P * (t - 1213)

    path = tmp_path / "s.db"
    run(lambda: SqliteStore(path), frames(counter), (1210,))
    kwh, _ = sqlite_kwh(path)
    # 0..1200: counter (exact); 1200..1210: power (owed 3,000 J); 1210..1215: the reset,
    # power; 1215..3600: the new counter. Power booked the frozen 1200..1210 and the
    # counter never paid it back: exactly the truth.
    assert kwh == pytest.approx(TRUTH_KWH, rel=1e-9)
    # The watermark follows the new counter: a later restart keeps it exact.
    with sqlite3.connect(path) as conn:
        (counter_j,), = conn.execute("SELECT counter_j FROM energy_state "
                                     "WHERE device = 'gpu0'").fetchall()
    assert counter_j == counter(3600)


def test_a_store_written_before_owed_was_kept_apart_opens_and_resumes(tmp_path):
    # A SQLite store from the previous release: energy_state without the reading.
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE energy_state (cluster TEXT NOT NULL, node TEXT NOT NULL, "
            "device TEXT NOT NULL, ts REAL NOT NULL, power_w REAL, counter_j REAL, "
            "PRIMARY KEY (cluster, node, device)) WITHOUT ROWID;")
        conn.execute("INSERT INTO energy_state VALUES ('c1', 'n1', 'gpu0', ?, ?, ?)",
                     (T0 + 1200.0, P, slow_counter(1200)))
    fs = [f for f in frames(slow_counter) if f.ts > T0 + 1200]
    run(lambda: SqliteStore(path), fs, (2410,))
    kwh, sec = sqlite_kwh(path)
    assert kwh == pytest.approx(P * 2400 / 3.6e6, rel=1e-9)
    assert sec == pytest.approx(2400.0)
    saved, _ = SqliteStore(path).energy_state("c1", "n1", T0 + 3600.0)
    gpu0 = next(s for s in saved if s.device == "gpu0")
    assert (gpu0.ts, gpu0.counter_j, gpu0.reading_j) == (T0 + 3600.0, slow_counter(3600), None)


def test_the_owed_part_reads_back_from_every_backend(ledger):  # noqa: F811
    open_store, flush = ledger
    store = open_store()
    c = cluster()
    owing = DeviceState(c, "n1", "gpu0", T0 + 1210.0, P, 1_363_000.0, 1_360_000.0)
    plain = DeviceState(c, "n1", "gpu1", T0 + 1210.0, P, 2e6)
    store.write_energy([], [owing, plain])
    flush()
    saved, _ = store.energy_state(c, "n1", T0 + 1215.0)
    assert sorted(saved) == sorted([owing, plain])
    # The counter moved on and owes nothing: an older reading is not taken for this one.
    paid = DeviceState(c, "n1", "gpu0", T0 + 1230.0, P, 1_366_000.0)
    store.write_energy([], [paid])
    flush()
    saved, _ = store.energy_state(c, "n1", T0 + 1235.0)
    assert sorted(saved) == sorted([paid, plain])


def test_a_restart_mid_step_is_exact_on_every_backend(ledger):  # noqa: F811
    open_store, flush = ledger
    c = cluster()
    # A counter as NVML reports one after weeks of uptime: 13 significant digits (mJ).
    run(open_store, frames(lambda t: slow_counter(t, base=4_321_987_654.321), c=c, span=600),
        (70, 130, 190, 250, 310, 370), flush)
    flush()
    rows = open_store().energy(T0, T0 + 3600, cluster=c)
    assert sum(r.energy_j for r in rows if r.device == "gpu0") == pytest.approx(P * 600,
                                                                                rel=1e-9)
