"""The monthly report: a hole in a carbon/PUE series is named as a hole (not as hours the
file does not cover), and the month's ledger is read a few hours at a time, summed as it
is read (memory grows with the names, not the rows), with progress on stderr."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import numpy as np
import pytest

from fleetwatch.carbon import J_PER_KWH, build_model
from fleetwatch.cli import main
from fleetwatch.dashboards.energy_data import series_warning
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import KINDS, build, build_chunks, ledger_chunks
from fleetwatch.report_files import _Progress, write_csv, write_report
from fleetwatch.report_month import month_span

MAY = month_span("2022-05")
H = 3600
MAY30 = calendar.timegm((2022, 5, 30, 0, 0, 0))


def _csv(tmp_path: Path, name: str, column: str, hours: dict[int, float]) -> Path:
    path = tmp_path / name
    path.write_text(f"timestamp,{column}\n" + "".join(
        f"{time.strftime('%Y-%m-%d %H:%M:%S+00:00', time.gmtime(h))},{v}\n"
        for h, v in sorted(hours.items())))
    return path


def _two_days(watts: float = 1000.0) -> list[EnergyRow]:
    """One GPU at ``watts`` every hour of 30 and 31 May 2022."""
    return [EnergyRow(MAY30 + i * H, "c1", "r1", "n1", "gpu0", "j", "u", "t",
                      watts * H, 0.0, float(H), 0.0, 0.0, 0.0) for i in range(48)]


def _holed(tmp_path: Path, name: str, column: str, value: float) -> Path:
    """May 30 and 31 with a 3 h hole (30 May 10:00-12:00, interpolated) and a 10 h hole
    (31 May 02:00-11:00, too long: the fallback)."""
    missing = {MAY30 + h * H for h in (*range(10, 13), *range(26, 36))}
    return _csv(tmp_path, name, column, {MAY30 + h * H: value for h in range(48)
                                         if MAY30 + h * H not in missing})


def test_a_long_hole_in_the_intensity_series_is_named_not_called_uncovered(tmp_path):
    path = _holed(tmp_path, "ci.csv", "avg_CI", 250.0)
    m = build_model("USA", 400.0, str(path), "avg_CI", 1.0, "", "pue", 0.1, "USD")
    r = build(_two_days(), m, *MAY, "2022-05")
    assert r.intensity_fallback_hours == 10
    assert r.series_warning == (
        "10 of 48 hours use the fallback intensity 400 gCO2e/kWh: the hourly series has a "
        "hole longer than interpolation bridges (neighbours up to 6 h apart): 2022-05-31 "
        "02:00 to 2022-05-31 11:00 UTC (10 hours missing) (carbon.intensity_csv)")
    # 38 hours at 250 g (3 of them interpolated between 250s), 10 at the 400 g fallback.
    assert r.total.co2e_kg == pytest.approx(38 * 0.25 + 10 * 0.4)


def test_the_dashboard_names_the_hole_too(tmp_path):
    path = _holed(tmp_path, "ci.csv", "avg_CI", 250.0)
    m = build_model("USA", 400.0, str(path), "avg_CI", 1.0, "", "pue", 0.1, "USD")
    assert series_warning(m, iter(range(MAY30, MAY30 + 48 * H, H))) == (
        build(_two_days(), m, *MAY, "2022-05").series_warning)


def test_a_long_hole_in_the_pue_series_is_named(tmp_path):
    path = _holed(tmp_path, "pue.csv", "pue", 1.5)
    m = build_model("USA", 200.0, "", "avg_CI", 1.2, str(path), "pue", 0.1, "USD")
    r = build(_two_days(), m, *MAY, "2022-05")
    assert r.series_warning == (
        "10 of 48 hours use the fallback PUE 1.2: the hourly series has a hole longer than "
        "interpolation bridges (neighbours up to 6 h apart): 2022-05-31 02:00 to 2022-05-31 "
        "11:00 UTC (10 hours missing) (carbon.pue_csv)")


def test_hours_outside_the_series_still_say_the_file_does_not_cover_them(tmp_path):
    # The series: 30 May only, with a 7 h hole; the ledger: 30 and 31 May.
    values = {MAY30 + h * H: 300.0 for h in range(24) if not 3 <= h < 10}
    path = _csv(tmp_path, "ci.csv", "avg_CI", values)
    m = build_model("USA", 400.0, str(path), "avg_CI", 1.0, "", "pue", 0.1, "USD")
    r = build(_two_days(), m, *MAY, "2022-05")
    assert r.series_warning == (
        "31 of 48 hours use the fallback intensity 400 gCO2e/kWh: the hourly series has a "
        "hole longer than interpolation bridges (neighbours up to 6 h apart): 2022-05-30 "
        "03:00 to 2022-05-30 09:00 UTC (7 hours missing); 24 hours are outside it: the "
        "hourly series covers 2022-05-30 00:00 to 2022-05-30 23:00 UTC (carbon.intensity_csv)")
    # Only outside: the wording the report always had.
    later = [r._replace(bucket_ts=r.bucket_ts + 86400) for r in _two_days()[:24]]
    assert build(later, m, *MAY, "2022-05").series_warning == (
        "24 of 24 hours use the fallback intensity 400 gCO2e/kWh: the hourly series covers "
        "2022-05-30 00:00 to 2022-05-30 23:00 UTC, not these hours (carbon.intensity_csv)")


def _fleet_rows() -> list[EnergyRow]:
    """Three days of 6 GPUs and a CPU on 2 nodes, jobs changing, values irregular enough
    that a different order of addition would show in the last bits."""
    rng = np.random.default_rng(7)
    rows = []
    for h in range(MAY[0] + 20 * 86400, MAY[0] + 23 * 86400, H):
        for node in ("n1", "n2"):
            for dev in ("cpu", "gpu0", "gpu1", "gpu2"):
                job = "" if dev == "gpu2" else f"{node}-{h // (5 * H)}"
                e = float(rng.uniform(1e5, 1.2e6))
                rows.append(EnergyRow(h, "c1" if node == "n1" else "c2", "r1", node, dev, job,
                                      "alice" if job else "", "ml" if job else "", e,
                                      e * float(rng.uniform(0, 0.3)), 3600.0 - float(
                                          rng.uniform(0, 60)), float(rng.uniform(0, 900)),
                                      float(rng.uniform(0, 60)), float(rng.uniform(0, 300))))
    return sorted(rows)


def test_chunks_give_the_lines_of_one_pass_exactly(tmp_path):
    rows = _fleet_rows()
    m = build_model("USA", 0.0, str(Path(__file__).resolve().parents[1] / "data" / "carbon"
                                     / "eia_hourly_2022_CISO.csv"), "avg_CI", 1.3, "", "pue",
                    0.2, "USD")
    whole = build(rows, m, *MAY, "2022-05", now=MAY[1] + 1)
    chunks = [rows[i:i + 50] for i in range(0, len(rows), 50)]
    seen: list[tuple[int, float]] = []
    parts = build_chunks(chunks, m, *MAY, "2022-05", now=MAY[1] + 1,
                         progress=lambda n, done: seen.append((n, done)))
    write_csv(whole, tmp_path / "whole.csv")
    write_csv(parts, tmp_path / "parts.csv")
    assert (tmp_path / "whole.csv").read_text() == (tmp_path / "parts.csv").read_text()
    for kind in KINDS:
        assert parts.lines[kind] == whole.lines[kind]  # the same floats, not just close
    assert parts.daily == whole.daily and parts.hourly_intensity == whole.hourly_intensity
    assert parts.began_ts == whole.began_ts and parts.hours_with_data == 72
    for k, v in vars(whole.total).items():
        assert getattr(parts.total, k) == (v if isinstance(v, str) else pytest.approx(v, 1e-12))
    assert parts.devices == pytest.approx(whole.devices, 1e-12)
    assert [n for n, _ in seen] == list(range(50, len(rows), 50)) + [len(rows)]
    assert seen[-1][1] == pytest.approx((MAY[0] + 23 * 86400 - MAY[0]) / (MAY[1] - MAY[0]))


class _CountingStore:
    """The SQLite store, counting the rows each ``energy`` call hands back."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.calls: list[int] = []

    def energy(self, start_ts, end_ts, cluster=None, node=None):
        rows = self.store.energy(start_ts, end_ts, cluster, node)
        self.calls.append(len(rows))
        return rows


def test_the_report_reads_the_month_a_few_hours_at_a_time(tmp_path):
    rows = _fleet_rows()
    db = SqliteStore(tmp_path / "s.db")
    db.write_energy(rows, [])
    m = build_model("USA", 400.0, "", "avg_CI", 1.3, "", "pue", 0.2, "USD")
    store = _CountingStore(db)
    paths = write_report(store, m, "2022-05", tmp_path / "out",  # type: ignore[arg-type]
                         now=MAY[1] + 1)
    # 31 days in windows of 6 h; no call holds more than 6 h of the 8 devices' rows.
    assert len(store.calls) == 31 * 4 and max(store.calls) == 6 * 8
    assert sum(store.calls) == len(rows)
    summary = json.loads(paths["json"].read_text())
    assert summary["it_kwh"] == pytest.approx(sum(r.energy_j for r in rows) / J_PER_KWH)
    assert list(ledger_chunks(db, MAY[0], MAY[0] + 7 * H, window_s=6 * H))[1] == [
        r for r in rows if MAY[0] + 6 * H <= r.bucket_ts < MAY[0] + 7 * H]


def test_progress_goes_to_stderr_and_ends_its_line(capsys):
    p = _Progress("2022-05", every_s=0.0)
    p(1_587_500, 0.5)
    p.done()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("\r  reading the ledger for 2022-05:  50.0% of the month,"
                            "    1,587,500 rows\n")
    quiet = _Progress("2022-05", every_s=3600.0)  # a report shorter than the interval
    quiet(10, 1.0)
    quiet.done()
    assert capsys.readouterr().err == ""


def test_cli_report_still_refuses_an_empty_month(tmp_path, capsys):
    """A month after the ledger's data with none of its own is refused (a store that
    stopped being written, a wrong store.path). One before the ledger begins (fleetwatch
    was installed since: deploy finding 8, r22) writes nothing and exits 0 saying so, so
    that the first month's timer or Job is no failed unit."""
    db = SqliteStore(tmp_path / "s.db")
    db.write_energy(_two_days(), [])
    db.close()
    assert main(["report", "--month", "2022-06", "--store", str(tmp_path / "s.db"),
                 "--out", str(tmp_path / "out")]) == 1
    assert "no energy in the ledger for 2022-06" in capsys.readouterr().err
    assert main(["report", "--month", "2022-04", "--store", str(tmp_path / "s.db"),
                 "--out", str(tmp_path / "out")]) == 0
    said = capsys.readouterr()
    assert said.err.startswith("fleetwatch report: not enough history yet: the ledger of ")
    assert "begins after 2022-04" in said.err and "nothing written" in said.err
    assert said.out == "" and not (tmp_path / "out").exists()
