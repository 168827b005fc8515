"""The month projection while the first hour of data is partial: the report and the
dashboard share one function and agree."""

from __future__ import annotations

import pytest

from fleetwatch.carbon import build_model
from fleetwatch.dashboards.energy_data import read_energy
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import build, data_began, month_span

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
