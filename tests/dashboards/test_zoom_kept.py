"""A chart the user zoomed (a real mouse drag in headless Chromium) stays zoomed across the
page's refreshes, on the node, utilization and energy pages; a new range starts clean."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from dash.testing.wait import until
from selenium.webdriver.common.action_chains import ActionChains

from fleetwatch.dashboards import create_app
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.conftest import SimFleet
from tests.dashboards.energy_fleet import fill
from tests.dashboards.test_browser import retry_stale, texts

pytestmark = pytest.mark.browser

# The x axis's range as numbers (milliseconds on a date axis), as drawn.
_RANGE_JS = """const g = document.querySelector(arguments[0] + ' .js-plotly-plot');
    const ax = g && g._fullLayout && g._fullLayout.xaxis;
    return ax && ax.range ? ax.range.map(v => ax.r2l(v)) : null;"""


def stepping_clock(step_s: float) -> Callable[[], float]:
    """Now, moved on by ``step_s`` at each read: each refresh draws a new window (and a new
    "refreshed" stamp, which says that the refresh reached the screen)."""
    start, reads = time.time(), itertools.count()
    return lambda: start + step_s * next(reads)


def x_range(dash_duo, graph: str) -> tuple[float, float] | None:
    got = dash_duo.driver.execute_script(_RANGE_JS, graph)
    return (got[0], got[1]) if got else None


def span(r: tuple[float, float] | None) -> float:
    return r[1] - r[0] if r else 0.0


def drag_zoom(dash_duo, graph: str) -> tuple[float, float]:
    """Drag across the middle of ``graph``'s plot area, as a user zooms; the range it set."""
    before = x_range(dash_duo, graph)

    def drag() -> None:
        area = dash_duo.find_element(f"{graph} .nsewdrag")
        dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", area)
        w = area.size["width"]
        (ActionChains(dash_duo.driver).move_to_element(area).move_by_offset(-w // 5, 0)
         .click_and_hold().move_by_offset(30, 0).move_by_offset(w // 4, 0).release()
         .perform())

    retry_stale(drag)
    # The drag covers about a quarter of the plot: the zoom, not a refresh's new window.
    seen: list[tuple[float, float] | None] = []
    until(lambda: 0 < span(seen.append(x_range(dash_duo, graph)) or seen[-1])
          < 0.5 * span(before), timeout=10)
    return seen[-1]


def refreshes(dash_duo, stamp: str, count: int = 2, timeout: float = 20) -> None:
    """Wait for ``count`` refreshes to reach the screen (the stamp changes each time)."""
    for _ in range(count):
        seen = texts(dash_duo, stamp)
        until(lambda seen=seen: texts(dash_duo, stamp) != seen, timeout=timeout)


def test_node_chart_keeps_the_users_zoom_across_refreshes(dash_duo, sim_fleet: SimFleet
                                                          ) -> None:
    sim_fleet.store.maintain(int(time.time() * 1000))  # the rollups that 6 h are read from
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=1.0,
                                     clock=stepping_clock(5.0)))
    dash_duo.driver.get(dash_duo.server_url + "/node/node-001")
    graph = "#node-graph-gpu_temp_c"
    dash_duo.wait_for_element(f"{graph} .scatterlayer .trace", timeout=15)
    refreshes(dash_duo, "#node-updated", 1)
    zoomed = drag_zoom(dash_duo, graph)
    refreshes(dash_duo, "#node-updated", 3)
    assert x_range(dash_duo, graph) == zoomed
    # Still 8 GPUs drawn, and the data still refreshes under the zoom.
    assert len(texts(dash_duo, f"{graph} .scatterlayer .trace")) == 8
    # A new range starts clean: the whole 6 h.
    dash_duo.driver.execute_script(
        "document.querySelector('#node-range input[value=\"6h\"]').click();")
    until(lambda: span(x_range(dash_duo, graph)) > 5.9 * 3600 * 1000, timeout=10)
    assert dash_duo.get_logs() == []


@pytest.fixture(scope="module")
def ledger_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("zoom") / "fleet.db"
    fill(path, nodes=2, hours=6)
    return path


@pytest.mark.parametrize(("url", "graph", "stamp"), [
    ("/utilization?range=6h", "#util-cdf-gpu_util_pct", "#util-updated"),
    ("/energy?range=24h", "#energy-kwh", "#energy-updated")])
def test_utilization_and_energy_charts_keep_the_zoom(dash_duo, ledger_db: Path, url: str,
                                                     graph: str, stamp: str) -> None:
    # The pages' own floors (15 s, 30 s) hold whatever refresh_s is: the test waits them out.
    dash_duo.start_server(create_app(SqliteStore(ledger_db, read_only=True), refresh_s=1.0,
                                     clock=stepping_clock(5.0)))
    dash_duo.driver.get(dash_duo.server_url + url)
    dash_duo.wait_for_element(f"{graph} .trace", timeout=20)
    until(lambda: texts(dash_duo, stamp) not in ([], [""]), timeout=20)
    zoomed = drag_zoom(dash_duo, graph)
    refreshes(dash_duo, stamp, 1, timeout=45)
    assert x_range(dash_duo, graph) == zoomed
    assert dash_duo.get_logs() == []

