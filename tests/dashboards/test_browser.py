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
    assert dash_duo.driver.current_url.endswith(f"/node/{HOT_NODE}?cluster=sim&gpu={HOT_GPU}")
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
    assert dash_duo.driver.current_url.endswith("/node/node-002?cluster=sim")
    assert dash_duo.get_logs() == []


@pytest.mark.headroom(120)  # the minute it adds stays before now
def test_live_refresh_picks_up_new_data(dash_duo, sim_fleet: SimFleet) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=0.5))
    dash_duo.wait_for_element("#active-alerts tr.alert-row", timeout=10)
    before = tile_value(dash_duo, "summary-asof")
    sim_fleet.advance(4)  # one more minute of the fleet, written after the page loaded
    newest = round(sim_fleet.sim.ts * 1000) / 1000   # as stored: whole milliseconds
    # Generous: the page refreshes every 0.5 s, but a loaded CI machine once took over 10 s.
    dash_duo.wait_for_text_to_equal("#summary-asof .tile-value", clock(newest), timeout=30)
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


# Row labels of the heatmap from top to bottom, as drawn on the screen.
_ROW_LABELS_JS = """return Array.from(document.querySelectorAll('#fleet-heatmap .ytick text'))
    .map(t => [t.getBoundingClientRect().top, t.textContent])
    .sort((a, b) => a[0] - b[0]).map(r => r[1]);"""


def row_labels(dash_duo) -> list[str]:
    return [t.strip() for t in dash_duo.driver.execute_script(_ROW_LABELS_JS)]


def test_heatmap_opened_before_data_still_has_node_000_on_top(dash_duo, tmp_path: Path) -> None:
    from fleetwatch.collectors.sim import FleetSim, SimParams
    from fleetwatch.pipeline.processor import Processor

    store = SqliteStore(tmp_path / "late.db")  # the schema only, as `up` starts
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "late.db", read_only=True),
                                     refresh_s=0.5))
    dash_duo.wait_for_contains_text("#fleet-empty", "No data yet", timeout=10)
    sim = FleetSim(SimParams(nodes=4, gpus=2, interval_s=15.0), start_ts=time.time() - 60)
    processor = Processor(store)
    for _ in range(3):
        sim.step()
        processor.process(sim.frames())
    until(lambda: len(row_labels(dash_duo)) == 4, timeout=10)
    assert row_labels(dash_duo) == ["node-000", "node-001", "node-002", "node-003"]
    assert texts(dash_duo, "#fleet-empty") == []
    store.close()


def test_a_click_anywhere_on_an_alert_row_opens_that_gpu(dash_duo, sim_fleet: SimFleet) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0, temp_limit_c=85.0))
    click(dash_duo, "#active-alerts tr.alert-row td.message a")
    dash_duo.wait_for_contains_text("#node-title", HOT_NODE, timeout=10)
    assert dash_duo.driver.current_url.endswith(f"/node/{HOT_NODE}?cluster=sim&gpu={HOT_GPU}")
    dash_duo.wait_for_text_to_equal("#node-focus", f"GPU {HOT_GPU}", timeout=10)
    # The temperature chart draws the alert threshold, labelled.
    until(lambda: any("limit 85 °C" in t for t in texts(
        dash_duo, "#node-graph-gpu_temp_c .annotation-text")), timeout=10)
    assert dash_duo.get_logs() == []


def test_stale_store_says_since_when_and_never_no_data_yet(dash_duo, sim_fleet: SimFleet) -> None:
    later = time.time() + 3600  # an hour after the last sample: every GPU is stale
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0, clock=lambda: later))
    dash_duo.wait_for_contains_text("#fleet-empty", "No fresh data", timeout=10)
    until(lambda: "No fresh data" in " ".join(
        texts(dash_duo, "#fleet-heatmap .annotation-text")), timeout=10)
    page = " ".join(texts(dash_duo, "#page"))
    assert "No data yet" not in page and "all clear" not in page
    assert "no data since" in texts(dash_duo, "#summary-firing")[0]


HOSTILE = "<img src=x onerror=alert(1)>"
SLASHED = 'a/b?c#d "q"'  # a quote shows as written, not as &quot;


def test_hostile_node_names_are_shown_as_written_and_link_right(dash_duo, tmp_path: Path) -> None:
    import dataclasses

    from fleetwatch.collectors.sim import FleetSim, SimParams, parse_fault
    from fleetwatch.models.rules import GpuTemperatureLimit
    from fleetwatch.pipeline.processor import Processor

    store = SqliteStore(tmp_path / "hostile.db")
    names = {"node-000": HOSTILE, "node-001": SLASHED}
    sim = FleetSim(SimParams(nodes=2, gpus=2, interval_s=15.0, job_mean_s=1e9, idle_mean_s=1,
                             busy_at_start=1.0, steady_load=True),
                   start_ts=time.time() - 120 * 15,
                   faults=[parse_fault("cooling:node-001/1@1m+40m")])
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=60)])
    for _ in range(120):
        sim.step()
        processor.process([dataclasses.replace(f, node=names[f.node]) for f in sim.frames()])
    store.close()
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "hostile.db", read_only=True),
                                     refresh_s=2.0))
    until(lambda: len(row_labels(dash_duo)) == 2, timeout=10)
    assert row_labels(dash_duo) == [HOSTILE, SLASHED]
    assert dash_duo.driver.find_elements("css selector", "#fleet-heatmap img") == []
    assert alert_rows(dash_duo) == [(SLASHED, "gpu1", "firing")]
    click(dash_duo, "#active-alerts a.node-link")
    dash_duo.wait_for_contains_text("#node-title", SLASHED, timeout=10)
    dash_duo.wait_for_element("#node-graph-gpu_temp_c .scatterlayer .trace", timeout=10)
    assert len(texts(dash_duo, "#node-graph-gpu_temp_c .scatterlayer .trace")) == 2
    # No script ran (an alert() would leave a dialog open) and the console is clean.
    assert dash_duo.driver.execute_script("return document.querySelectorAll('img').length") == 0
    assert dash_duo.get_logs() == []
