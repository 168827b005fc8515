"""Defects the dashboard tester found (round 16): a one-hour idle chart drawn, a rack alert's
row without a dead link, the empty heatmap's sentence wrapped, the Alerts page's range carried
to a node page, zooms remembered; and, in Chromium, a narrow window and a young ledger."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from dash import dcc
from dash.testing.wait import until

from fleetwatch.dashboards import alert_tables, components, create_app, energy_figures, figures
from fleetwatch.dashboards import alerts as alerts_page
from tests.dashboards.conftest import SimFleet
from tests.dashboards.fakes import NOW, alert
from tests.dashboards.test_alert_table import _walk, rows

HOUR = 1_800_000_000 - 1_800_000_000 % 3600


def test_idle_share_of_one_ledger_hour_is_drawn_over_that_hour() -> None:
    fig = energy_figures.idle_share([HOUR], {"all clusters": [0.17]})
    (trace,) = fig.data
    # A single point of a line draws nothing: it has a marker, and the axis spans its hour.
    assert "markers" in trace.mode and list(trace.y) == [pytest.approx(17.0)]
    lo, hi = fig.layout.xaxis.range
    assert (hi - lo).total_seconds() == 3600 and lo <= trace.x[0] <= hi


def test_a_rack_alert_has_no_link_to_a_node_page_that_does_not_exist() -> None:
    rack = alert("", None, rule="rack_cooling")
    gpu = alert("node-a", 3)
    by_node = {row.__dict__.get("data-node"): row for row in rows(
        alert_tables.alert_table([rack, gpu], NOW, "t"))}
    assert [c for c in _walk(by_node[""]) if isinstance(c, dcc.Link)] == []
    assert rack.message in str(by_node[""].to_plotly_json())
    assert [c.href for c in _walk(by_node["node-a"]) if isinstance(c, dcc.Link)] == [
        "/node/node-a?cluster=sim&gpu=3"]


def test_the_empty_figures_sentence_is_wrapped_and_escaped() -> None:
    text = ("No fresh data: no GPU has reported since 22:44:40 UTC (6 min ago): the "
            "collectors stopped, or the processor is behind (as `fleetwatch up` is while it "
            "catches up after a start). Alerts below are <as> the last data left them.")
    shown = figures.empty_figure(text).layout.annotations[0].text
    lines = shown.split("<br>")
    assert len(lines) > 2 and max(map(len, lines)) <= figures.WRAP_CHARS + len("&lt;as&gt;")
    assert "&lt;as&gt;" in shown and " ".join(lines).replace("&lt;as&gt;", "<as>") == text


@pytest.mark.parametrize(("rng", "href"), [
    ("24h", "/node/node-a?cluster=sim&range=24h&gpu=3"),  # the Alerts page's, not the node's
    ("7d", "/node/node-a?cluster=sim&range=7d&gpu=3"),
    ("1h", "/node/node-a?cluster=sim&gpu=3")])  # the node page's own default: left out
def test_the_alerts_pages_range_goes_to_the_node_page(rng: str, href: str) -> None:
    active, _ = alerts_page.tables([alert("node-a", 3)], [], NOW, rng, {})
    assert [c.href for c in _walk(active) if isinstance(c, dcc.Link)] == [href]


def test_a_zoom_is_held_until_a_double_click_and_other_events_leave_it() -> None:
    held = figures.zoom_after(None, {"xaxis.range[0]": "2026-11-26 22:13",
                                     "xaxis.range[1]": "2026-11-26 22:30"})
    assert held == {"xaxis": ["2026-11-26 22:13", "2026-11-26 22:30"]}
    assert figures.zoom_after(held, {"autosize": True}) == held
    both = figures.zoom_after(held, {"yaxis.range": [40, 90]})
    assert both == {"xaxis": held["xaxis"], "yaxis": [40, 90]}
    assert figures.zoom_after(both, {"xaxis.autorange": True, "yaxis.autorange": True}) == {}
    fig = energy_figures.idle_share([HOUR], {"all clusters": [0.17]})
    figures.hold_zoom(fig, both)
    assert list(fig.layout.yaxis.range) == [40, 90] and fig.layout.xaxis.autorange is False
    # A zoom is held for the range it was made in only.
    store = {"range": "1h", "graphs": {"g": both}}
    assert components.zoomed(store, "1h", "g") == both
    assert components.zoomed(store, "6h", "g") == {}


# -- in Chromium ---------------------------------------------------------------------------

_BOXES_JS = """return Array.from(document.querySelectorAll(arguments[0])).map(e => {
    const r = e.getBoundingClientRect(); return [r.left, r.right, r.height]; });"""


@pytest.fixture
def narrow(dash_duo) -> Iterator[None]:
    dash_duo.driver.set_window_size(800, 900)
    yield


@pytest.mark.browser
def test_a_narrow_window_keeps_alert_rows_short_and_the_message_in_view(
        dash_duo, sim_fleet: SimFleet, narrow: None) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0))
    dash_duo.driver.get(dash_duo.server_url + "/alerts")
    dash_duo.wait_for_element("#active-alert-table tr.alert-row", timeout=15)
    width = dash_duo.driver.execute_script("return document.documentElement.clientWidth;")
    assert width <= 800
    boxes = dash_duo.driver.execute_script(_BOXES_JS, "#active-alert-table tr.alert-row")
    assert boxes and max(h for _, _, h in boxes) < 160, boxes
    # The message, the row's link, starts well inside the window, not at its edge.
    (link,) = dash_duo.driver.execute_script(_BOXES_JS, "#active-alert-table a.node-link")
    assert link[0] < width - 150, (link, width)
    # The range buttons stay one line each ("1 h", not "1" over "h").
    labels = dash_duo.driver.execute_script(_BOXES_JS, "#alerts-range .range-label")
    assert len(labels) == 6 and max(h for _, _, h in labels) < 30, labels
    dash_duo.driver.get(dash_duo.server_url + "/")
    dash_duo.wait_for_element("#active-alerts tr.alert-row", timeout=15)
    labels = dash_duo.driver.execute_script(_BOXES_JS, "#fleet-range .range-label")
    assert len(labels) == 6 and max(h for _, _, h in labels) < 30, labels
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_idle_chart_of_a_young_ledger_shows_its_hour(dash_duo, tmp_path) -> None:
    """Half an hour of data within one clock hour: the ledger holds that hour, drawn as a
    point over it. The page's clock is the data's, so the hour does not depend on when
    the test runs (half an hour back from now straddles an hour half the time)."""
    import math

    from fleetwatch.collectors.sim import FleetSim, SimParams
    from fleetwatch.models.rules import GpuTemperatureLimit
    from fleetwatch.pipeline.processor import Processor
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    hour = math.floor(time.time() / 3600) * 3600 - 3 * 3600
    store = SqliteStore(tmp_path / "young.db")
    sim = FleetSim(SimParams(nodes=4, gpus=8, interval_s=15.0, job_mean_s=1e9, idle_mean_s=1,
                             busy_at_start=1.0, steady_load=True), start_ts=hour + 60)
    fleet = SimFleet(tmp_path / "young.db", store, sim,
                     Processor(store, [GpuTemperatureLimit(85, for_s=60)]))
    fleet.advance(120)                       # 30 minutes, all inside that hour
    dash_duo.start_server(create_app(fleet.reader(), refresh_s=2.0,
                                     clock=lambda: hour + 60 + 1800 + 30))
    dash_duo.driver.get(dash_duo.server_url + "/utilization?range=1h")
    until(lambda: dash_duo.driver.execute_script(
        "return document.querySelectorAll('#util-idle .scatterlayer .point').length") == 1,
        timeout=20)
    span_ms = dash_duo.driver.execute_script(
        "const ax = document.querySelector('#util-idle .js-plotly-plot')._fullLayout.xaxis;"
        "return ax.r2l(ax.range[1]) - ax.r2l(ax.range[0]);")
    assert span_ms >= 3600 * 1000
    assert dash_duo.get_logs() == []
