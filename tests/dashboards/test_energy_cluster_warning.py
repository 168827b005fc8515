"""A cluster's own grid file (carbon.clusters.NAME.intensity_csv) that misses the hours
shown: the energy page warns as the report does (one function makes both), naming the
cluster's key and file; a page of the global grid alone says nothing."""

from __future__ import annotations

import calendar
import dataclasses
from pathlib import Path

import pytest

from fleetwatch.carbon import J_PER_KWH, build_model
from fleetwatch.dashboards import create_app
from fleetwatch.dashboards.energy_data import series_warning
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import build
from fleetwatch.report_month import month_span

CISO = Path(__file__).resolve().parents[1] / "data" / "carbon" / "eia_hourly_2022_CISO.csv"
NOW = calendar.timegm((2026, 11, 26, 16, 30, 0))
HOURS = [NOW - NOW % 3600 - k * 3600 for k in range(12, 0, -1)]


def model():
    glob = build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0.10, "USD")
    own = build_model("USA", 400.0, str(CISO), "avg_CI", 1.2, "", "pue", 0.10, "USD")
    return dataclasses.replace(glob, clusters={"c-tx": own})


def rows() -> list[EnergyRow]:
    return [EnergyRow(h, c, "r1", "n1", "gpu0", "j", "u", "t", 0.3 * J_PER_KWH, 0.0,
                      3600.0, 0.0, 0.0, 0.0) for h in HOURS for c in ("c-tx", "c-1")]


def test_the_page_and_the_report_say_the_same_of_a_clusters_own_file() -> None:
    report = build(rows(), model(), *month_span("2026-11"), "2026-11", now=NOW)
    pairs = [(c, h) for h in HOURS for c in ("c-tx", "c-1")]
    warning = series_warning(model(), HOURS, pairs)
    assert warning == report.series_warning
    assert warning.startswith("cluster c-tx: 12 of 12 hours use the fallback intensity 400")
    assert "(carbon.clusters.c-tx.intensity_csv, eia_hourly_2022_CISO.csv)" in warning
    assert series_warning(model(), HOURS, [("c-1", h) for h in HOURS]) == ""


@pytest.mark.browser
def test_the_energy_page_warns_of_a_clusters_own_file(dash_duo, tmp_path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.write_energy(rows(), [])
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "s.db", read_only=True),
                                     clock=lambda: NOW, carbon=model()))
    dash_duo.driver.get(dash_duo.server_url + "/energy?range=24h&cluster=c-tx")
    dash_duo.wait_for_contains_text("#energy-notice", "cluster c-tx: 12 of 12 hours",
                                    timeout=15)
    text = dash_duo.find_element("#energy-notice").text
    assert "carbon.clusters.c-tx.intensity_csv, eia_hourly_2022_CISO.csv" in text
    dash_duo.driver.get(dash_duo.server_url + "/energy?range=24h&cluster=c-1")
    dash_duo.wait_for_contains_text("#energy-inrange", "kWh", timeout=15)
    assert "fallback" not in dash_duo.find_element("#energy-notice").text
    assert dash_duo.get_logs() == []
