"""A node silent for longer than ``max_jump_s`` (7 days) that comes back at a time the
processor's clock has reached: a long outage (a repair; ``simulate`` appending a later
span), said as one at INFO, not warned of as a clock error. The silence is not booked as
missing time (documented); a real clock error still warns."""

from __future__ import annotations

import logging
import time

from fleetwatch.cli import main
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.store.sqlite import SqliteStore

from .test_clock_steps import T0, frame

DAY = 86400.0


def observe(store: SqliteStore, frames, now: float) -> EnergyIntegrator:
    ei = EnergyIntegrator(store, clock=lambda: now)
    for i in range(0, len(frames), 20):
        ei.observe(frames[i:i + 20])
    return ei


def test_a_node_back_after_8_days_is_a_silence_not_a_clock_error(tmp_path, caplog):
    store = SqliteStore(tmp_path / "s.db")
    fr = [frame(T0 + 5 * k, k) for k in range(61)]
    fr += [frame(T0 + 8 * DAY + 5 * k, 61 + k) for k in range(61)]
    with caplog.at_level(logging.INFO):
        ei = observe(store, fr, T0 + 9 * DAY)
    rows = store.energy(0, 5e9)
    store.close()
    assert "error" not in ei.clock.counts
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == []
    said = [r.getMessage() for r in caplog.records if "sent nothing" in r.getMessage()]
    assert len(said) == 1 and "that silence is not counted as missing GPU time" in said[0]
    assert "(8.0 days, longer than the 7 days the ledger books as missing time)" in said[0]
    assert sum(r.missing_s for r in rows) == 0.0  # documented: not booked


def test_a_jump_back_or_ahead_of_the_processors_clock_is_still_a_clock_error(tmp_path,
                                                                             caplog):
    store = SqliteStore(tmp_path / "s.db")
    fr = [frame(T0 + 5 * k, k) for k in range(61)]
    back = fr + [frame(T0 - 8 * DAY, 61, seq=False)]
    with caplog.at_level(logging.WARNING):
        ei = observe(store, back, T0 + DAY)
    assert ei.clock.counts["error"] == 1
    store.close()
    store = SqliteStore(tmp_path / "t.db")
    ahead = fr + [frame(T0 + 30 * DAY, 61, seq=False)]
    with caplog.at_level(logging.WARNING):
        ei = observe(store, ahead, T0 + DAY)
    store.close()
    assert ei.clock.counts["error"] == 1
    assert sum("clock jumped" in r.getMessage() for r in caplog.records) == 2


def test_simulate_appending_a_later_span_warns_of_no_clock_error(tmp_path, capsys, caplog):
    db = str(tmp_path / "s.db")
    end = int(time.time()) // 3600 * 3600 - 3600
    args = ["simulate", "--nodes", "2", "--gpus", "2", "--no-faults", "--duration", "30m",
            "--interval", "30s", "--store", db]
    with caplog.at_level(logging.WARNING):
        assert main([*args, "--end", str(end - 10 * 86400)]) == 0
        assert main([*args, "--end", str(end)]) == 0
    out = capsys.readouterr()
    assert "clock" not in out.out + out.err
    assert not [r for r in caplog.records if "clock" in r.getMessage()]
    store = SqliteStore(db)
    rows = store.energy(end - 11 * 86400, end + 3600)
    store.close()
    assert {r.bucket_ts < end - 5 * 86400 for r in rows} == {True, False}  # both spans
