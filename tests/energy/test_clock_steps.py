"""The ledger across a node's clock faults, as the data-quality tester crafted them: 2 GPUs
at 300 W with an exact counter, 121 samples 5 s apart (360 kJ), in batches of 20, with one
frame stamped in 2099, an NTP step back or forward; read back from a real SQLite store."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = 1_764_000_000.0
W = 300.0
EXACT = 2 * W * 600


def frame(ts: float, k: int, seq: bool = True, extra: float = 0.0) -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB",
                            {"gpu_power_w": W, "gpu_energy_j": 1e6 + W * 5 * k + extra,
                             "gpu_power_limit_w": 400.0, "gpu_sm_active_ratio": 0.8}, "j1")
                 for i in range(2))
    return Frame("clk", "r9", "en", ts, gpus, HostReading({}), seq=1000 + k if seq else 0)


def run(store: SqliteStore, frames: list[Frame]) -> EnergyIntegrator:
    ei = EnergyIntegrator(store)
    for i in range(0, len(frames), 20):
        ei.observe(frames[i:i + 20])
    return ei


def ledger(store: SqliteStore) -> tuple[float, float, int]:
    rows = store.energy(0, 5e9)
    return (sum(r.energy_j for r in rows), sum(r.missing_s for r in rows), len(rows))


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


def test_a_frame_stamped_in_2099_books_no_years_of_rows_and_the_ledger_goes_on(store, caplog):
    fr = [frame(T0 + 5 * k, k) for k in range(121)]
    bogus = frame(4070908800.0, 60, seq=False, extra=1.0)
    with caplog.at_level(logging.WARNING):
        ei = run(store, fr[:61] + [bogus] + fr[61:])
    energy, missing, n = ledger(store)
    assert n < 10 and missing == 0.0  # no hour-by-hour rows to 2099
    assert energy == pytest.approx(EXACT, abs=2 * W * 5 + 2)  # at most the step's interval
    assert ei.clock.counts["error"] >= 1
    assert sum("clock jumped" in r.getMessage() for r in caplog.records) == 1
    assert store.roll_up_energy(5e9) >= 1


def test_a_2099_watermark_in_the_store_is_left_behind_after_a_restart(tmp_path):
    path = tmp_path / "s.db"
    first = SqliteStore(path)
    run(first, [frame(T0, 0), frame(4070908800.0, 1, seq=False)])
    first.close()
    second = SqliteStore(path)
    run(second, [frame(T0 + 5 * k, k) for k in range(2, 121)])
    energy, missing, n = ledger(second)
    assert missing == 0.0 and n < 10
    assert energy == pytest.approx(2 * W * 5 * 118)
    second.close()


def test_an_ntp_step_back_keeps_the_energy_and_is_counted_and_said(store, caplog):
    fr = [frame(T0 + 5 * k if k <= 60 else T0 + 5 * k - 120, k) for k in range(121)]
    with caplog.at_level(logging.WARNING):
        ei = run(store, fr)
    energy, missing, _ = ledger(store)
    assert energy == pytest.approx(EXACT)
    assert missing == 0.0
    assert ei.clock.counts["back"] == 1
    assert ei.clock.counts["overlap"] == 24  # stamped over the 120 s already sent
    said = [r.getMessage() for r in caplog.records if "stepped back" in r.getMessage()]
    assert len(said) == 1 and "en" in said[0]


def test_a_batch_redelivered_after_a_step_back_adds_nothing(store):
    fr = [frame(T0 + 5 * k if k <= 60 else T0 + 5 * k - 120, k) for k in range(121)]
    ei = EnergyIntegrator(store)
    for i in range(0, 121, 20):
        ei.observe(fr[i:i + 20])
        ei.observe(fr[i:i + 20])  # every batch twice
    assert ledger(store)[0] == pytest.approx(EXACT)


def test_an_ntp_step_forward_is_not_missing_time(store, caplog):
    fr = [frame(T0 + 5 * k if k <= 60 else T0 + 5 * k + 600, k) for k in range(121)]
    with caplog.at_level(logging.WARNING):
        ei = run(store, fr)
    energy, missing, _ = ledger(store)
    assert energy == pytest.approx(EXACT)
    assert missing == 0.0
    assert ei.clock.counts["forward"] == 1
    assert any("stepped forward" in r.getMessage() for r in caplog.records)


def test_a_real_outage_with_a_running_counter_is_not_a_clock_step(store):
    # 605 s without frames whose counter shows 300 W throughout: the node was silent (no
    # clock step), and its counter, sound across the silence, measured its energy.
    fr = [frame(T0 + 5 * k, k) for k in range(61)]
    fr += [frame(T0 + 5 * k + 600, k + 120) for k in range(61, 121)]
    ei = run(store, fr)
    rows = store.energy(0, 5e9)
    assert not ei.clock.counts
    assert sum(r.missing_s for r in rows) == 0.0
    assert sum(r.gap_s for r in rows) == pytest.approx(2 * 605)
    assert sum(r.gap_j for r in rows) == pytest.approx(2 * W * 605)


def test_the_roll_up_of_many_hours_is_done_in_parts(store):
    # More dirty hours than SQLite takes bound variables in one statement.
    store.write_energy([], [])
    conn = store._energy_conn()
    n = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) + 10
    with conn:
        conn.executemany("INSERT INTO energy_dirty VALUES (?)", [(3600 * k,) for k in range(n)])
    assert store.roll_up_energy(5e9) == n
    assert conn.execute("SELECT count(*) FROM energy_dirty").fetchone() == (0,)


def test_the_processor_counts_a_step_back_on_its_metrics(store):
    from fleetwatch.pipeline.health import ProcessorCollector
    from fleetwatch.pipeline.processor import Processor

    p = Processor(store)
    fr = [frame(T0 + 5 * k if k <= 60 else T0 + 5 * k - 120, k) for k in range(121)]
    for i in range(0, 121, 20):
        p.process(fr[i:i + 20])
    family = next(m for m in ProcessorCollector(p, None).collect()  # type: ignore[arg-type]
                  if m.name == "fleetwatch_processor_clock_steps")
    assert {s.labels["kind"]: s.value for s in family.samples} == {"back": 1, "overlap": 24}
    assert ledger(store)[0] == pytest.approx(EXACT)


def test_a_batch_delivered_again_after_a_restart_is_no_step_back(tmp_path):
    # A processor that restarts takes the watermark from the store and gets the last
    # batch again: in seq order and behind the watermark, it is a replay, not a step.
    path = tmp_path / "s.db"
    fr = [frame(T0 + 5 * k, k) for k in range(121)]
    first = SqliteStore(path)
    run(first, fr[:100])
    first.close()
    second = SqliteStore(path)
    ei = EnergyIntegrator(second)
    ei.observe(fr[80:100])
    ei.observe(fr[100:])
    assert ei.clock.counts == {}
    assert ledger(second)[0] == pytest.approx(EXACT)
    second.close()


def test_a_silence_that_ends_ahead_of_the_processors_clock_is_not_missing_time(store, caplog):
    # One frame a day ahead of the processor's clock (under max_jump_s): without the clock
    # it is 24 h of missing time, 24 rows per GPU; with it, a clock error, nothing booked.
    now = T0 + 600
    fr = [frame(T0 + 5 * k, k) for k in range(61)] + [frame(T0 + 86400, 61, seq=False)]
    with caplog.at_level(logging.WARNING):
        ei = EnergyIntegrator(store, clock=lambda: now)
        for i in range(0, len(fr), 20):
            ei.observe(fr[i:i + 20])
    energy, missing, n = ledger(store)
    assert missing == 0.0 and n < 6
    assert energy == pytest.approx(2 * W * 300)
    assert ei.clock.counts["error"] == 1
    assert any("ahead of this processor's clock" in r.getMessage() for r in caplog.records)


def test_the_live_processors_integrator_knows_the_wall_clock(tmp_path):
    from fleetwatch.config import EnergyConfig
    from fleetwatch.wiring import energy_integrator

    s = SqliteStore(tmp_path / "w.db")
    ei = energy_integrator(EnergyConfig(), s)
    assert ei is not None and ei._clock is not None
    s.close()
