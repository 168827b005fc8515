"""Hours with data are hours with measured data: an hour whose ledger rows hold only a
silent node's missing time is unknown, and the month projection's rate is that of the
time measured (the report and the dashboard count it with one function)."""

from __future__ import annotations

import pytest

from fleetwatch.carbon import build_model
from fleetwatch.dashboards.energy_data import read_energy
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import build
from fleetwatch.report_month import HourData, measured_hours, month_span

START, END = month_span("2022-05")
H = 3600
H0 = START + 5 * 86400            # 6 May 00:00: the node's data begins
KW = 6.0                           # 8 GPUs drawing 6 kW together


def model():
    return build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")


def gpu_rows(hour: int, seconds: float, missing: float = 0.0) -> list[EnergyRow]:
    return [EnergyRow(hour, "c1", "r1", "n1", f"gpu{i}", "j", "u", "t",
                      KW * 1000 / 8 * seconds, 0.0, seconds, 0.0, missing, 0.0)
            for i in range(8)]


def silent_days() -> tuple[list[EnergyRow], float]:
    """4 h of data, then the node silent for 5 days (the ledger books every hour of it
    as missing time), then 2 h up to now: 6 h measured of the 126 h since it began."""
    rows = [r for k in range(4) for r in gpu_rows(H0 + k * H, H)]
    back = H0 + 4 * H + 5 * 86400
    rows += [r for h in range(H0 + 4 * H, back, H) for r in gpu_rows(h, 0.0, H)]
    rows += [r for k in range(2) for r in gpu_rows(back + k * H, H)]
    return rows, back + 2 * H


def test_an_hour_of_only_missing_time_is_not_an_hour_with_data():
    hours = [HourData(H0, 8 * H, 0.0, 1.0), HourData(H0 + H, 0.0, 8 * H, 0.0),
             HourData(H0 + 2 * H, 4 * H, 4 * H, 1.0)]
    assert measured_hours(hours, H0, H0 + 3 * H) == {H0: H, H0 + 2 * H: H / 2}


def test_silent_days_are_not_hours_with_data_nor_covered_time(tmp_path):
    rows, now = silent_days()
    report = build(rows, model(), START, END, "2022-05", now=now)
    assert report.hours_with_data == 6
    assert report.total.missing_gpu_hours == pytest.approx(8 * 120)
    why = "only 6.0 h of the 126.0 h since the data began have data"
    assert (report.projected_co2e_kg, report.summary()["projection_withheld"]) == (None, why)
    assert "6 of the month's first" in report.coverage()
    store = SqliteStore(tmp_path / "s.db")
    store.write_energy(rows, [])
    store.roll_up_energy(now + H)
    view = read_energy(store, model(), now - 86400, now, now)
    store.close()
    assert view.month_projection_kg is None and view.projection_withheld == why


def test_a_month_of_silent_days_is_partial_not_complete():
    # Every hour of May has rows, but 10 days hold only missing time.
    rows = [r for h in range(START, END, H)
            for r in (gpu_rows(h, 0.0, H) if START + 86400 <= h < START + 11 * 86400
                      else gpu_rows(h, H))]
    report = build(rows, model(), START, END, "2022-05", now=END + H)
    assert (report.status, report.hours_with_data) == ("partial", 744 - 240)


def test_data_back_at_minute_30_counts_half_that_hour(tmp_path):
    # 40 h of data, then no row for 2 days (a silence the ledger did not book), then
    # the node back at 00:30 and 8 h 30 min of data up to now: 48.5 h measured.
    rows = [r for k in range(40) for r in gpu_rows(H0 + k * H, H)]
    back = H0 + 40 * H + 2 * 86400
    rows += gpu_rows(back, H / 2) + [r for k in range(1, 9) for r in gpu_rows(back + k * H, H)]
    now = back + 9 * H
    so_far = KW * 48.5 * 1.5 * 0.4
    expected = so_far + so_far / (48.5 * H) * (END - now)
    report = build(rows, model(), START, END, "2022-05", now=now)
    assert report.projected_co2e_kg == pytest.approx(expected)
    store = SqliteStore(tmp_path / "s.db")
    store.write_energy(rows, [])
    store.roll_up_energy(now + H)
    view = read_energy(store, model(), now - 86400, now, now)
    store.close()
    assert view.month_projection_kg == pytest.approx(expected)
