"""The energy and utilization pages in headless Chromium over two days of a simulated
fleet: each loads with data and no console errors; the URL carries page, node, GPU, range."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import create_app, timerange
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.energy_fleet import fill

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def energy_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("energy") / "fleet.db"
    fill(path, nodes=4, hours=30)
    yield path


def _texts(dash_duo, selector: str) -> list[str]:
    return dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent);",
        selector)


def _traces(dash_duo, graph: str) -> int:
    return dash_duo.driver.execute_script(
        "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        # numpy arrays travel as typed arrays ({dtype, bdata}), lists as arrays
        "return g && g.data ? g.data.filter(t => t.x && (t.x.length || (t.x.bdata || '').length))"
        ".length : 0;", graph)


def test_energy_page_loads_with_data(dash_duo, energy_db: Path) -> None:
    dash_duo.start_server(create_app(SqliteStore(energy_db, read_only=True)))
    dash_duo.driver.get(dash_duo.server_url + "/energy")
    dash_duo.wait_for_contains_text("#energy-inrange", "kWh", timeout=15)
    until(lambda: _traces(dash_duo, "#energy-kwh") == 2, timeout=15)  # two clusters
    assert _traces(dash_duo, "#energy-co2e") == 2
    until(lambda: _traces(dash_duo, "#energy-jobs") == 1, timeout=10)
    assert _traces(dash_duo, "#energy-users") == 1
    value = _texts(dash_duo, "#energy-inrange .tile-value")[0]
    assert float(value.split()[0].replace(",", "")) > 0
    month = _texts(dash_duo, "#energy-month .tile-value")[0]  # "412 kg CO2e", "1.27 t CO2e"
    assert float(month.split()[0].replace(",", "")) > 0 and month.split()[1:] in (
        ["kg", "CO2e"], ["t", "CO2e"])
    assert "%" in _texts(dash_duo, "#energy-idle-share .tile-value")[0]
    assert "location-based" in _texts(dash_duo, "#energy-method")[0]
    # Arrives drawn; a new range redraws it and goes into the URL.
    dash_duo.driver.execute_script(
        "document.querySelector('#energy-range input[value=\"1h\"]').click();")
    until(lambda: _texts(dash_duo, "#energy-inrange .tile-value")[0] != value, timeout=10)
    until(lambda: "range=1h" in dash_duo.driver.current_url, timeout=10)
    assert dash_duo.get_logs() == []


def test_utilization_page_loads_with_cdfs_and_jobs(dash_duo, energy_db: Path) -> None:
    dash_duo.start_server(create_app(SqliteStore(energy_db, read_only=True)))
    dash_duo.driver.get(dash_duo.server_url + "/utilization")
    for metric in ("gpu_sm_active_ratio", "gpu_util_pct", "gpu_fb_used_bytes", "gpu_power_w"):
        until(lambda m=metric: _traces(dash_duo, f"#util-cdf-{m}") == 2, timeout=15)
    until(lambda: _traces(dash_duo, "#util-idle") == 2, timeout=10)
    dash_duo.wait_for_element("#util-job-table tr.job-row", timeout=10)
    assert dash_duo.get_logs() == []


def test_a_deep_link_opens_the_same_view_and_the_picker_updates_the_url(
        dash_duo, energy_db: Path) -> None:
    dash_duo.start_server(create_app(SqliteStore(energy_db, read_only=True)))
    dash_duo.driver.get(dash_duo.server_url + "/utilization?range=6h&node=node-001&gpu=3")
    dash_duo.wait_for_text_to_equal("#util-scope-text", "node-001 · GPU 3", timeout=15)
    # One GPU of one cluster's node-001 (both clusters name their nodes node-000..).
    until(lambda: _traces(dash_duo, "#util-cdf-gpu_power_w") >= 1, timeout=15)
    checked = dash_duo.driver.execute_script(
        "return document.querySelector('#util-range input:checked').value;")
    assert checked == "6h"
    dash_duo.driver.execute_script(
        "document.querySelector('#util-range input[value=\"24h\"]').click();")
    until(lambda: "range=24h" in dash_duo.driver.current_url, timeout=10)
    assert "node=node-001" in dash_duo.driver.current_url
    assert "gpu=3" in dash_duo.driver.current_url
    assert dash_duo.get_logs() == []


def test_query_strings_round_trip_and_bad_ones_fall_back() -> None:
    q = timerange.Query("7d", "node-001", 3)
    assert timerange.parse(q.search(), "1h") == q
    assert timerange.parse("?range=forever&gpu=x", "1h") == timerange.Query("1h")
    assert timerange.window("month", 1_700_000_000)[0] == 1_698_796_800  # 2023-11-01
