"""`fleetwatch alerts` says when the data stopped coming (a stopped processor leaves every
open alert as it was): after a minute, as fast as node_silent says a silent node, in the
text and in `--json` as a field."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleetwatch.alert_view import LAG_S, data_end, lag_text, lagging, newest_data
from fleetwatch.cli import main
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_alerts_cli import alert


def _store(db: Path, sample_age_s: float, alerts: bool = True) -> float:
    """A store whose newest GPU sample is ``sample_age_s`` old, with a firing alert."""
    now = time.time()
    s = SqliteStore(db)
    gpu = GpuReading(0, "GPU-0", "NVIDIA A100-SXM4-80GB", {"gpu_temp_c": 55.0})
    s.write([Frame("c1", "r2", "node-007", now - sample_age_s, (gpu,), HostReading())])
    if alerts:
        s.write_alerts([alert("gpu_temp_high", "firing", "warning", now - 600,
                              fired=now - 570)])
    s.close()
    return now - sample_age_s


def test_lagging_starts_after_a_minute_and_names_the_processor() -> None:
    now = 1_800_000_000.0
    assert not lagging(None, now) and not lagging(now - LAG_S + 1, now)
    assert lagging(now - LAG_S - 1, now)
    text = lag_text(now - 180, now)
    assert text.startswith("no new data for 3 min (newest sample 2027-01-15 07:57:00 UTC)")
    assert "`fleetwatch process`" in text and "/healthz" in text


def test_the_newest_sample_leaves_out_a_clock_ahead(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    newest = _store(db, 150)
    s = SqliteStore(db)
    gpu = GpuReading(0, "GPU-0", "NVIDIA A100-SXM4-80GB", {"gpu_temp_c": 55.0})
    s.write([Frame("c1", "r2", "node-ahead", time.time() + 3600, (gpu,), HostReading())])
    assert newest_data(s, time.time()) == pytest.approx(newest, abs=0.01)
    s.close()


def test_a_stopped_processor_is_said_in_text_and_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "stopped.db"
    newest = _store(db, 150)  # the processor stopped 2.5 min ago: under the 5 min "ended"
    assert main(["alerts", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "no new data for 2 min" in out and "/healthz" in out
    assert "FIRING" in out
    assert main(["alerts", "--json", "--store", str(db)]) == 0
    got = capsys.readouterr()
    (rec,) = [json.loads(line) for line in got.out.splitlines()]
    assert rec["data_stale"] is True
    assert rec["data_newest_ts"] == pytest.approx(newest, abs=0.01)
    assert "WARNING: no new data for 2 min" in got.err


def test_live_data_say_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "live.db"
    _store(db, 5)
    assert main(["alerts", "--store", str(db)]) == 0
    assert "no new data" not in capsys.readouterr().out
    assert main(["alerts", "--json", "--store", str(db)]) == 0
    got = capsys.readouterr()
    assert json.loads(got.out)["data_stale"] is False and got.err == ""


def test_no_open_alerts_from_a_stopped_processor_is_no_all_clear(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "quiet.db"
    _store(db, 200, alerts=False)
    assert main(["alerts", "--store", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"no open alerts in {db}"
    assert out[1].startswith("no new data for 3 min") and "/healthz" in out[1]


def test_the_newest_sample_of_a_long_silent_store_is_not_a_walk_of_its_history(
        tmp_path: Path) -> None:
    """The collectors stopped 10 min ago over hours of samples: the newest one (what the
    banner, the alerts page and `fleetwatch alerts` ask each time) is found on the store's
    key, in a bounded number of SQLite steps, not by reading every row back to the start."""
    stopped = time.time() - 600
    s = SqliteStore(tmp_path / "hours.db")
    gpus = tuple(GpuReading(g, f"GPU-{g}", "test", {"gpu_temp_c": 50.0 + g}) for g in range(8))
    s.write([Frame("c1", "r1", "node-001", stopped - 5 * k, gpus,
                   HostReading({"host_cpu_util_pct": 1.0})) for k in range(2000)])
    steps = [0]
    s._conn().set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1) or 0, 100)
    now = time.time()
    assert newest_data(s, now) == pytest.approx(stopped, abs=0.01)
    assert data_end(s, now) == pytest.approx(stopped, abs=0.01)
    # 18,000 rows: a walk of them takes thousands of 100-instruction steps.
    assert steps[0] < 20, steps[0]
    s.close()
