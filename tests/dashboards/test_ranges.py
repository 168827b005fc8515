"""The time-range picker and deep links on Fleet, Node and Alerts, in headless Chromium.

A store with three hours of a simulated fleet and two resolved alerts (one
two hours ago, one three days ago), so that a range longer than a page's
default shows what the default does not. Each page opened from a URL shows
that view (page, node, GPU, range); the picker rewrites the URL and the view.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.dashboards import create_app
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.test_browser import alert_rows, retry_stale, texts

pytestmark = pytest.mark.browser
HOURS = 3
INTERVAL_S = 60.0


def _resolved(node: str, gpu: int, ago_s: float, now: float) -> Alert:
    end = now - ago_s
    return Alert(id=f"temp:{node}:gpu{gpu}", rule="gpu_temp_limit", severity="critical",
                 cluster="sim", rack="rack-00", node=node, device=f"gpu{gpu}",
                 state="resolved", started_ts=end - 600, updated_ts=end, value=86.0,
                 message="GPU temperature 86.0 °C over 85 °C", fired_ts=end - 540,
                 resolved_ts=end)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """4 nodes x 2 GPUs over the last three hours; resolved alerts 2 h and 3 days ago."""
    path = tmp_path_factory.mktemp("ranges") / "fleet.db"
    store = SqliteStore(path)
    now = time.time()
    sim = FleetSim(SimParams(nodes=4, gpus=2, interval_s=INTERVAL_S, job_mean_s=1e9,
                             idle_mean_s=1, busy_at_start=1.0, steady_load=True),
                   start_ts=now - HOURS * 3600)
    processor = Processor(store)
    for _ in range(int(HOURS * 3600 / INTERVAL_S)):
        sim.step()
        processor.process(sim.frames())
    # What the running processor does every 30 s: spans over a few hours read 1-minute
    # rollups, made here.
    store.maintain(int(time.time() * 1000))
    store.write_alerts([_resolved("node-002", 1, 2 * 3600, now),
                        _resolved("node-003", 0, 3 * 86400, now)])
    store.close()
    yield path


def _start(dash_duo, path: Path, url: str) -> None:
    dash_duo.start_server(create_app(SqliteStore(path, read_only=True), refresh_s=2.0))
    dash_duo.driver.get(dash_duo.server_url + url)


def _checked(dash_duo, picker: str) -> str | None:
    return dash_duo.driver.execute_script(
        "const i = document.querySelector(arguments[0] + ' input:checked');"
        "return i ? i.value : null;", f"#{picker}")


def _pick(dash_duo, picker: str, value: str) -> None:
    dash_duo.wait_for_element(f"#{picker} input[value='{value}']", timeout=10)
    retry_stale(lambda: dash_duo.driver.execute_script(
        "document.querySelector(arguments[0]).click();",
        f"#{picker} input[value='{value}']"))


def _axis(dash_duo, graph: str) -> tuple[float, float, float] | None:
    """(x-axis start, end, the oldest point drawn) of a node chart, in epoch seconds."""
    got = dash_duo.driver.execute_script(
        "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        "if (!g || !g._fullLayout || !g.data || !g.data.length) return null;"
        "return [g._fullLayout.xaxis.range, g.data.map(t => t.x[0])];", graph)
    if not got:
        return None
    (lo, hi), firsts = got

    def epoch(text: str) -> float:  # naive UTC, as the figures write them
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()

    return epoch(lo), epoch(hi), min(epoch(x) for x in firsts)


def _span_h(dash_duo, graph: str = "#node-graph-gpu_temp_c") -> float:
    axis = _axis(dash_duo, graph)
    return (axis[1] - axis[0]) / 3600 if axis else 0.0


def test_node_deep_link_opens_that_gpu_over_that_range(dash_duo, history: Path) -> None:
    _start(dash_duo, history, "/node/node-001?range=6h&gpu=1")
    dash_duo.wait_for_contains_text("#node-title", "node-001", timeout=15)
    dash_duo.wait_for_text_to_equal("#node-focus", "GPU 1", timeout=10)
    assert _checked(dash_duo, "node-range") == "6h"
    # The window is six hours (and a little slack past now), and the points from
    # two and three hours ago, which the default hour leaves out, are drawn.
    until(lambda: 6.0 <= _span_h(dash_duo) < 6.1, timeout=15)
    oldest = _axis(dash_duo, "#node-graph-gpu_temp_c")[2]
    assert oldest < time.time() - 2.5 * 3600
    assert texts(dash_duo, "#node-hint-gpu_temp_c") == ["°C · last 6 h · UTC"]
    assert len(texts(dash_duo, "#node-graph-gpu_power_w .scatterlayer .trace")) == 2
    # The picker: a new range redraws the charts and goes into the URL, GPU kept.
    _pick(dash_duo, "node-range", "24h")
    until(lambda: "range=24h" in dash_duo.driver.current_url, timeout=10)
    assert "/node/node-001?" in dash_duo.driver.current_url
    assert "gpu=1" in dash_duo.driver.current_url
    until(lambda: 24.0 <= _span_h(dash_duo) < 24.1, timeout=10)
    assert texts(dash_duo, "#node-hint-gpu_temp_c") == ["°C · last 24 h · UTC"]
    assert dash_duo.get_logs() == []


def test_node_page_default_is_still_the_last_hour(dash_duo, history: Path) -> None:
    _start(dash_duo, history, "/node/node-001")
    dash_duo.wait_for_contains_text("#node-title", "node-001", timeout=15)
    until(lambda: 1.0 <= _span_h(dash_duo) < 1.1, timeout=15)
    assert _checked(dash_duo, "node-range") == "1h"
    assert _axis(dash_duo, "#node-graph-gpu_temp_c")[2] >= time.time() - 3600 - 120
    assert dash_duo.get_logs() == []


def test_alerts_deep_link_shows_the_resolved_of_that_range(dash_duo, history: Path) -> None:
    _start(dash_duo, history, "/alerts?range=7d")
    until(lambda: len(alert_rows(dash_duo, "#resolved-alert-table")) == 2, timeout=15)
    assert _checked(dash_duo, "alerts-range") == "7d"
    assert {r[0] for r in alert_rows(dash_duo, "#resolved-alert-table")} == {
        "node-002", "node-003"}
    assert texts(dash_duo, "#alerts-resolved-hint") == ["last 7 d"]
    # The chosen range goes with a click to the node's page.
    hrefs = dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll('#resolved-alert-table a.node-link'))"
        ".map(a => a.getAttribute('href'));")
    assert "/node/node-003?cluster=sim&range=7d&gpu=0" in hrefs
    # Back to the default day: the alert of three days ago goes.
    _pick(dash_duo, "alerts-range", "24h")
    until(lambda: "range=24h" in dash_duo.driver.current_url, timeout=10)
    until(lambda: [r[0] for r in alert_rows(dash_duo, "#resolved-alert-table")] == ["node-002"],
          timeout=10)
    assert dash_duo.get_logs() == []


def test_alerts_page_default_is_still_the_last_day(dash_duo, history: Path) -> None:
    _start(dash_duo, history, "/alerts")
    until(lambda: len(alert_rows(dash_duo, "#resolved-alert-table")) == 1, timeout=15)
    assert alert_rows(dash_duo, "#resolved-alert-table")[0][0] == "node-002"
    assert _checked(dash_duo, "alerts-range") == "24h"
    dash_duo.wait_for_element("#active-alert-table-empty")
    assert dash_duo.get_logs() == []


def test_fleet_deep_link_keeps_its_range_for_the_pages_it_opens(dash_duo,
                                                                 history: Path) -> None:
    _start(dash_duo, history, "/?range=6h")
    dash_duo.wait_for_element("#fleet-heatmap .heatmaplayer .hm", timeout=15)
    until(lambda: len(texts(dash_duo, "#fleet-heatmap .heatmaplayer text")) == 8, timeout=10)
    assert _checked(dash_duo, "fleet-range") == "6h"
    # What the range means here is said on the page (the heatmap is the fleet now).
    note = dash_duo.driver.execute_script(
        "return document.querySelector('#fleet-range').closest('[title]').title;")
    assert "now" in note and "node and alert pages" in note
    assert dash_duo.find_element("#fleet-alerts-link").get_attribute("href").endswith(
        "/alerts?range=6h")
    # The picker rewrites the URL and the link to the alerts.
    _pick(dash_duo, "fleet-range", "7d")
    until(lambda: dash_duo.driver.current_url.endswith("/?range=7d"), timeout=10)
    until(lambda: dash_duo.find_element("#fleet-alerts-link").get_attribute("href")
          .endswith("/alerts?range=7d"), timeout=10)
    # A heatmap row opens the node over the same range. Rows are node-000..node-003
    # top to bottom: the third quarter is node-002.
    retry_stale(lambda: dash_duo.click_at_coord_fractions(
        dash_duo.find_element("#fleet-heatmap .nsewdrag"), 0.3, 0.625))
    dash_duo.wait_for_contains_text("#node-title", "node-002", timeout=10)
    assert dash_duo.driver.current_url.endswith("/node/node-002?cluster=sim&range=7d")
    until(lambda: _checked(dash_duo, "node-range") == "7d", timeout=10)
    until(lambda: 7 * 24 <= _span_h(dash_duo) < 7 * 24 + 0.1, timeout=10)
    assert dash_duo.get_logs() == []


def test_links_carry_a_picked_range_and_opening_a_page_keeps_its_address() -> None:
    from fleetwatch.dashboards import components, timerange

    assert components.node_href("a/b", 3, "7d") == "/node/a%2Fb?range=7d&gpu=3"
    assert components.node_href("node-001", 3) == "/node/node-001?gpu=3"
    assert timerange.page_search("6h", 2) == "?range=6h&gpu=2"
    assert timerange.label("6h") == "last 6 h" and timerange.label("month") == "this month"
    # Drawing a page sets its picker: no rewrite when the address already says it.
    assert not timerange.new_search("?gpu=3", "1h", "1h")
    assert not timerange.new_search("?range=6h&gpu=3", "1h", "6h")
    assert timerange.new_search("?gpu=3", "1h", "6h")
