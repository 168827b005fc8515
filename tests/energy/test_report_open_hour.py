"""A month to date's coverage ends at the report's time, not at the end of the hour in
progress (grow #7: "to 27 Nov 16:00" in a report made at 15:01)."""

from __future__ import annotations

from fleetwatch.carbon import build_model
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.report import build
from fleetwatch.report_month import month_span

START, END = month_span("2022-05")
H = 3600


def rows(hours: int, last_s: float) -> list[EnergyRow]:
    """Whole hours, then ``last_s`` seconds of the open one."""
    return [EnergyRow(START + k * H, "c1", "r1", "n1", "gpu0", "j", "u", "t",
                      750.0 * s, 0.0, s, 0.0, 0.0, 0.0)
            for k, s in enumerate([float(H)] * hours + [last_s])]


def model():
    return build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")


def test_month_to_date_coverage_ends_now_not_at_the_open_hours_end() -> None:
    now = START + 15 * H + 60  # 15:01, data to 15:00:17 in the 15:00 ledger hour
    report = build(rows(15, 17.0), model(), START, END, "2022-05", now=now)
    summary = report.summary()
    assert summary["covered_until"] == "2022-05-01T15:01:00+00:00"
    assert "to 01 May 15:01 UTC" in report.coverage(), report.coverage()


def test_an_ended_month_still_ends_at_its_last_hour() -> None:
    report = build(rows(15, 17.0), model(), START, END, "2022-05", now=END + 7200)
    assert report.summary()["covered_until"] == "2022-05-01T16:00:00+00:00"
