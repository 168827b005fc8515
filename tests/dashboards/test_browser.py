"""The running dashboard in headless Chromium, over a SQLite store fed by the simulator.

Run with ``pytest tests/dashboards --headless``. The app reads a read-only
handle on the file while the fixture writes through its own, as the
dashboard and the processor do in production.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dash.testing.wait import until
from selenium.common.exceptions import StaleElementReferenceException

from fleetwatch.dashboards import create_app
from fleetwatch.dashboards.components import clock
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.conftest import HOT, SimFleet

pytestmark = pytest.mark.browser
HOT_NODE, HOT_GPU = HOT


# The pages re-render on every refresh, so an element found one moment may be
# replaced the next: read what a check needs in one script, atomically.
_ROWS_JS = """return Array.from(document.querySelectorAll(arguments[0])).map(
    r => [r.dataset.node, r.dataset.device, r.dataset.state]);"""
_TEXTS_JS = """return Array.from(document.querySelectorAll(arguments[0])).map(
    e => e.textContent);"""


def retry_stale(action, attempts: int = 10):
    """Run a find-then-act step again if a refresh replaced the element in between."""
    for _ in range(attempts - 1):
        try:
            return action()
        except StaleElementReferenceException:
            time.sleep(0.2)
    return action()


def click(dash_duo, selector: str) -> None:
    retry_stale(lambda: dash_duo.wait_for_element(selector, timeout=10).click())


def alert_rows(dash_duo, table: str = "#active-alerts") -> list[tuple[str, str, str]]:
    rows = dash_duo.driver.execute_script(_ROWS_JS, f"{table} tr.alert-row")
    return [tuple(r) for r in rows]


def texts(dash_duo, selector: str) -> list[str]:
    return dash_duo.driver.execute_script(_TEXTS_JS, selector)


def tile_value(dash_duo, tile_id: str) -> str:
    (value,) = texts(dash_duo, f"#{tile_id} .tile-value")
    return value


def test_fleet_page_shows_the_hot_gpu_firing(dash_duo, sim_fleet: SimFleet) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0))
    dash_duo.wait_for_element("#active-alerts tr.alert-row", timeout=10)
    # The heatmap is drawn: one heatmap trace with a cell per GPU.
    dash_duo.wait_for_element("#fleet-heatmap .heatmaplayer .hm")
    assert alert_rows(dash_duo) == [(HOT_NODE, f"gpu{HOT_GPU}", "firing")]
    dash_duo.wait_for_text_to_equal("#summary-reporting .tile-value", "32")
    assert tile_value(dash_duo, "summary-firing") == "1"
    assert f"{HOT_NODE} · GPU {HOT_GPU}" in texts(dash_duo, "#summary-hottest")[0]
    # Every GPU has a cell; the hot one carries the alert marker and no other does.
    cells = texts(dash_duo, "#fleet-heatmap .heatmaplayer text")
    assert len(cells) == 32 and sum("▲" in t for t in cells) == 1
    assert dash_duo.get_logs() == []


def test_alert_and_heatmap_lead_to_the_node_page(dash_duo, sim_fleet: SimFleet) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0))
    click(dash_duo, "#active-alerts a.node-link")
    dash_duo.wait_for_contains_text("#node-title", HOT_NODE, timeout=10)
    assert dash_duo.driver.current_url.endswith(f"/node/{HOT_NODE}")
    for metric in ("gpu_temp_c", "gpu_power_w", "gpu_util_pct"):
        dash_duo.wait_for_element(f"#node-graph-{metric} .scatterlayer .trace")
        assert len(texts(dash_duo, f"#node-graph-{metric} .scatterlayer .trace")) == 8, metric
    # The injected fault is shaded and labelled on the temperature graph.
    assert "gpu3: injected cooling fault" in texts(dash_duo, "#node-graph-gpu_temp_c")[0]
    assert [r[2] for r in alert_rows(dash_duo, "#node-alert-table")] == ["firing"]

    # Back to the fleet, then a click on node-002's row of the heatmap.
    click(dash_duo, "#nav-fleet")
    dash_duo.wait_for_element("#fleet-heatmap .heatmaplayer .hm", timeout=10)
    # Rows are node-000..node-003 top to bottom: the third quarter is node-002.
    retry_stale(lambda: dash_duo.click_at_coord_fractions(
        dash_duo.find_element("#fleet-heatmap .nsewdrag"), 0.3, 0.625))
    dash_duo.wait_for_contains_text("#node-title", "node-002", timeout=10)
    assert dash_duo.driver.current_url.endswith("/node/node-002")
    assert dash_duo.get_logs() == []


def test_live_refresh_picks_up_new_data(dash_duo, sim_fleet: SimFleet) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=0.5))
    dash_duo.wait_for_element("#active-alerts tr.alert-row", timeout=10)
    before = tile_value(dash_duo, "summary-asof")
    sim_fleet.advance(4)  # one more minute of the fleet, written after the page loaded
    newest = sim_fleet.sim.ts
    dash_duo.wait_for_text_to_equal("#summary-asof .tile-value", clock(newest), timeout=10)
    assert clock(newest) != before
    assert alert_rows(dash_duo) == [(HOT_NODE, f"gpu{HOT_GPU}", "firing")]


def test_alerts_page_lists_active_alerts(dash_duo, sim_fleet: SimFleet) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0))
    click(dash_duo, "#nav-alerts")
    dash_duo.wait_for_element("#active-alert-table tr.alert-row", timeout=10)
    assert [r[0] for r in alert_rows(dash_duo, "#active-alert-table")] == [HOT_NODE]
    dash_duo.wait_for_element("#resolved-alert-table-empty")


def test_empty_store_says_no_data_yet(dash_duo, tmp_path: Path) -> None:
    SqliteStore(tmp_path / "empty.db").close()  # the schema, as a fresh `fleetwatch up` has
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "empty.db", read_only=True),
                                     refresh_s=2.0))
    dash_duo.wait_for_contains_text("#fleet-empty", "No data yet", timeout=10)
    dash_duo.wait_for_element("#active-alerts-empty")
    until(lambda: "No data yet" in " ".join(texts(dash_duo, "#fleet-heatmap .annotation-text")),
          timeout=10)
    assert tile_value(dash_duo, "summary-reporting") == "0"
    assert dash_duo.get_logs() == []


def test_missing_store_is_a_message_not_a_traceback(dash_duo, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "absent.db", read_only=True)
    dash_duo.start_server(create_app(store, refresh_s=2.0))
    dash_duo.wait_for_contains_text("#notice", "Store unavailable", timeout=10)
    assert "no store at" in texts(dash_duo, "#notice")[0]
    assert dash_duo.get_logs() == []
