"""A month whose only data is its last half hour says so: half an hour of the month's
hours, not 0 (a share rounded away) nor 1 (the ledger's hour counted whole)."""

from __future__ import annotations

from fleetwatch.carbon import build_model
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.report import build
from fleetwatch.report_html import render
from fleetwatch.report_month import month_span

START, END = month_span("2022-06")  # 720 hours


def half_hour() -> list[EnergyRow]:
    return [EnergyRow(END - 3600, "c", "r", "n", f"gpu{i}", "", "", "", 1800 * 300.0, 0.0,
                      1800.0, 0.0, 0.0, 0.0) for i in range(4)]


def model():
    return build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")


def test_a_month_with_only_its_last_half_hour_says_half_an_hour():
    r = build(half_hour(), model(), START, END, "2022-06", now=END + 10)
    said = r.coverage()
    assert "only 0.5 of the month's 720 hours have data (0.07%)" in said, said
    assert "data from 30 Jun 23:30" in said, said
    s = r.summary()
    assert s["hours_of_data"] == 0.5 and s["hours_so_far"] == 720
    assert "0.5 of 720" in render(r)


def test_whole_hours_are_still_said_as_whole_numbers():
    rows = [r._replace(bucket_ts=START + k * 3600, energy_j=3600 * 300.0, seconds=3600.0)
            for k in range(96) for r in half_hour()]
    r = build(rows, model(), START, END, "2022-06", now=END + 10)
    assert "only 96 of the month's 720 hours have data (13%)" in r.coverage()
