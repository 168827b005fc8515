"""The month projection while the first hour of data is partial: the report and the
dashboard share one function and agree."""

from __future__ import annotations

import pytest

from fleetwatch.carbon import build_model
from fleetwatch.dashboards.energy_data import read_energy
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import build
from fleetwatch.report_month import HourData, data_began, month_projection, month_span

START, END = month_span("2022-05")
H0 = START + 10 * 86400            # the data began at 10 May 00:40
NOW = H0 + 3600 + 20 * 60          # and it is now 01:20: 40 min of data
KW = 6.0                           # one node drawing 6 kW, all the time


def rows() -> list[EnergyRow]:
    def row(hour: int, seconds: float) -> EnergyRow:
        return EnergyRow(hour, "c1", "r1", "n1", "gpu0", "j", "u", "t",
                         KW * 1000 * seconds, 0.0, seconds, 0.0, 0.0, 0.0)
    return [row(H0, 20 * 60), row(H0 + 3600, 20 * 60)]


def model():
    return build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")


def expected_projection_kg() -> float:
    so_far = KW * 40 / 60 * 1.5 * 0.4  # kWh x PUE x kg/kWh
    return so_far + so_far / (40 * 60) * (END - NOW)


def test_data_began_is_inside_the_oldest_hour_not_its_start() -> None:
    assert data_began(rows(), NOW) == pytest.approx(H0 + 40 * 60)
    # While the oldest hour still runs, its end is now.
    assert data_began(rows()[:1], H0 + 3600 - 60) == pytest.approx(H0 + 40 * 60 - 60)
    assert data_began([], NOW) is None


def test_report_projects_at_the_rate_since_the_data_began() -> None:
    report = build(rows(), model(), START, END, "2022-05", now=NOW)
    assert report.projected_co2e_kg == pytest.approx(expected_projection_kg())


def test_dashboard_projects_the_same_as_the_report(tmp_path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.write_energy(rows(), [])
    view = read_energy(store, model(), NOW - 3600, NOW + 3600, NOW)
    store.close()
    assert view.month_kwh == pytest.approx(KW * 40 / 60)
    assert view.month_projection_kg == pytest.approx(expected_projection_kg())


def hourly_rows(hours) -> list[EnergyRow]:
    """The node at 6 kW in each of these whole hours."""
    return [EnergyRow(h, "c1", "r1", "n1", "gpu0", "j", "u", "t", KW * 1000 * 3600, 0.0,
                      3600.0, 0.0, 0.0, 0.0) for h in hours]


def test_silent_hours_are_not_zero_use_in_the_projection(tmp_path) -> None:
    # 48 h of data, then no node has reported for 5 h: the rate is that of the 48 h.
    now = H0 + 53 * 3600
    rows = hourly_rows(range(H0, H0 + 48 * 3600, 3600))
    so_far = KW * 48 * 1.5 * 0.4
    expected = so_far + so_far / 48 * (END - now) / 3600
    report = build(rows, model(), START, END, "2022-05", now=now)
    assert report.projected_co2e_kg == pytest.approx(expected)
    store = SqliteStore(tmp_path / "s.db")
    store.write_energy(rows, [])
    view = read_energy(store, model(), now - 86400, now, now)
    store.close()
    assert view.month_projection_kg == pytest.approx(expected)
    # Today (since 00:00 of the 12th, 5 h ago) no node has reported: unknown, not 0 kWh.
    assert view.today_kwh is None and view.today_co2e_kg is None


def test_a_projection_from_too_few_hours_is_withheld_with_the_reason(tmp_path) -> None:
    # 3 h of data, then a week of silence: no rate to project the month with.
    now = H0 + 3 * 3600 + 7 * 86400
    rows = hourly_rows(range(H0, H0 + 3 * 3600, 3600))
    report = build(rows, model(), START, END, "2022-05", now=now)
    assert report.projected_co2e_kg is None
    why = report.summary()["projection_withheld"]
    assert why == "only 3.0 h of the 171.0 h since the data began have data"
    store = SqliteStore(tmp_path / "s.db")
    store.write_energy(rows, [])
    view = read_energy(store, model(), now - 86400, now, now)
    store.close()
    assert view.month_projection_kg is None and view.projection_withheld == why


def test_an_empty_store_shows_no_data_not_zero(tmp_path) -> None:
    from fleetwatch.dashboards.energy import summary

    store = SqliteStore(tmp_path / "s.db")
    view = read_energy(store, model(), NOW - 3600, NOW, NOW)
    store.close()
    assert (view.today_kwh, view.month_co2e_kg, view.month_projection_kg) == (None, None, None)
    tiles = {t.id: t for t in summary(view)}
    texts = {k: [c.children for c in t.children] for k, t in tiles.items()}
    assert texts["energy-today"][1:] == ["no data", "no node has reported since 00:00 UTC"]
    assert texts["energy-month"][1] == "no data"
    assert texts["energy-projection"][1:] == ["no data", "no data this month"]


def test_data_stamped_after_now_is_flagged_and_not_projected(tmp_path) -> None:
    # The tester's month: 10 min of data at the month's very end while the report's clock
    # reads 4 days earlier (a node whose clock runs ahead wrote it).
    now = END - 4 * 86400
    last = [EnergyRow(END - 3600, "c1", "r1", "n1", "gpu0", "j", "u", "t", 600 * 600.0, 0.0,
                      600.0, 0.0, 0.0, 0.0)]
    for data in (last, hourly_rows(range(now - 5 * 3600, now, 3600)) + last):
        report = build(data, model(), START, END, "2022-05", now=now)
        assert report.projected_co2e_kg is None
        why = report.summary()["projection_withheld"]
        assert why.startswith("1 h of data is stamped after now (2022-05-28 00:00 UTC)")
        assert report.coverage().endswith("data stamped up to 01 Jun 00:00 UTC, after now "
                                          "(28 May 00:00 UTC): a node's clock runs ahead")
        store = SqliteStore(tmp_path / f"s{len(data)}.db")
        store.write_energy(data, [])
        view = read_energy(store, model(), now - 86400, now, now)
        store.close()
        assert view.month_projection_kg is None and view.projection_withheld == why


def test_data_that_began_after_now_in_the_current_hour_is_not_projected() -> None:
    # now 00:10 and the data began at 00:40 of the same hour: 1 s "covered" projected the
    # month at 3,600 times the hour's rate.
    p, why = month_projection(1.0, [HourData(H0, 600.0, 0.0, 1.0)], H0 + 40 * 60, H0 + 10 * 60,
                              START, END)
    assert p is None and why.startswith("1 h of data is stamped after now")
