"""The pages on a phone (390x844, what an alert's link opens at 3 a.m.) and on a desktop, in
headless Chromium: no page wider than the screen, alert rows as cards (node, message and
action readable without scrolling sideways), no heatmap numbers printed over each other,
node charts stacked; the desktop keeps its table, numbers and side-by-side charts. Also the
FIRING badge's contrast and the cluster picker's label."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import create_app
from tests.dashboards.conftest import HOT, SimFleet

pytestmark = pytest.mark.browser
SHOTS = Path(os.environ.get("FLEETWATCH_SHOTS", "")) if os.environ.get("FLEETWATCH_SHOTS") else None

_METRICS = """
const box = s => { const e = document.querySelector(s); if (!e) return null;
  const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
const shown = [...document.querySelectorAll('#fleet-heatmap .heatmap-label')]
  .filter(e => getComputedStyle(e).display !== 'none' && e.textContent.trim()).length;
const lum = c => { const v = c.match(/[\\d.]+/g).slice(0, 3).map(x => x / 255)
  .map(x => x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4);
  return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
const badge = document.querySelector('.badge-firing');
let contrast = null;
if (badge) { const cs = getComputedStyle(badge);
  const [a, b] = [lum(cs.color), lum(cs.backgroundColor)].sort((x, y) => y - x);
  contrast = (a + 0.05) / (b + 0.05); }
const unlabelled = [...document.querySelectorAll('input')].filter(e => !e.labels?.length
  && !e.getAttribute('aria-label') && !e.getAttribute('aria-labelledby')
  && e.type !== 'radio' && e.type !== 'checkbox' && e.type !== 'hidden').length;
return {innerWidth: innerWidth, scrollWidth: document.documentElement.scrollWidth,
  labels: shown, contrast: contrast, unlabelled: unlabelled,
  node: box('.alerts tr.alert-row td.node'), message: box('.alerts tr.alert-row td.message'),
  action: box('.alerts tr.alert-row td.action'), head: box('.alerts thead th'),
  temp: box('#node-graph-gpu_temp_c'), power: box('#node-graph-gpu_power_w'),
  util: box('#node-graph-gpu_util_pct')};
"""


def _view(dash_duo, width: int, height: int, mobile: bool) -> None:
    dash_duo.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})


def _metrics(dash_duo, name: str) -> dict:
    time.sleep(0.5)  # plotly redraws at the new size
    if SHOTS:
        dash_duo.driver.save_screenshot(str(SHOTS / f"{name}.png"))
    return dash_duo.driver.execute_script(_METRICS)


def _fleet(dash_duo, base: str) -> dict:
    dash_duo.driver.get(base + "/")
    dash_duo.wait_for_element("#active-alerts tr.alert-row td.node", timeout=15)
    dash_duo.wait_for_element("#fleet-heatmap .heatmaplayer", timeout=15)
    return dash_duo.driver.execute_script(_METRICS)


def _node(dash_duo, base: str) -> dict:
    dash_duo.driver.get(f"{base}/node/{HOT[0]}?gpu={HOT[1]}")
    dash_duo.wait_for_element("#node-graph-gpu_util_pct .scatterlayer .trace", timeout=15)
    return dash_duo.driver.execute_script(_METRICS)


def test_phone_and_desktop(dash_duo, sim_fleet: SimFleet) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0))
    base = dash_duo.server_url

    _view(dash_duo, 390, 844, True)
    _fleet(dash_duo, base)
    m = _metrics(dash_duo, "phone_fleet")
    assert m["innerWidth"] == 390 and m["scrollWidth"] <= 390, m  # nothing widens the page
    assert m["labels"] == 0, m                                    # no numbers over each other
    assert m["head"] is None or m["head"][2] - m["head"][0] == 0, m  # cards: no header row
    assert m["node"][2] <= 390 and m["message"][2] <= 390, m     # the node and message seen
    assert m["message"][2] - m["message"][0] > 300, m            # the message a full line
    assert m["contrast"] >= 4.5 and m["unlabelled"] == 0, m
    dash_duo.driver.get(base + "/alerts")
    dash_duo.wait_for_element("#active-alert-table tr.alert-row td.action", timeout=15)
    m = _metrics(dash_duo, "phone_alerts")
    assert m["scrollWidth"] <= 390 and m["action"][2] <= 390, m
    _node(dash_duo, base)
    m = _metrics(dash_duo, "phone_node")
    assert m["scrollWidth"] <= 390, m
    assert m["power"][3] <= m["util"][1] + 1, m  # stacked, each its own width for its labels
    assert m["util"][2] - m["util"][0] > 300, m

    _view(dash_duo, 1400, 900, False)
    _fleet(dash_duo, base)
    until(lambda: dash_duo.driver.execute_script(_METRICS)["labels"] >= 32, timeout=10)
    m = _metrics(dash_duo, "desktop_fleet")
    assert m["head"][2] - m["head"][0] > 0 and m["contrast"] >= 4.5, m  # the table as it was
    assert m["node"][1] == m["message"][1], m  # one row: the node beside its message
    _node(dash_duo, base)
    m = _metrics(dash_duo, "desktop_node")
    assert abs(m["power"][1] - m["util"][1]) < 2, m  # power and utilization side by side
    assert dash_duo.get_logs() == []
