"""The fleet page of a few hundred nodes on a 1920x1080 wall, in headless Chromium: the
firing alerts (node, rule, since) are on the first screen, above the heatmap; the table
there is short, critical first, with a line and a link for the rest; heatmap rows follow
the racks' natural order (rack-2 before rack-10, rack-99 before rack-100)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import alert_tables, create_app
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.test_browser import texts

pytestmark = pytest.mark.browser
NODES = 300
_FIRST_ROW_JS = """const r = document.querySelector('#active-alerts tr.alert-row');
const h = document.querySelector('#fleet-heatmap');
return {row: r.getBoundingClientRect().bottom, heat: h.getBoundingClientRect().top,
        view: innerHeight};"""
_Y_JS = "return document.querySelector('#fleet-heatmap .js-plotly-plot').data[0].y;"


def _alert(n: int, now: float, severity: str) -> Alert:
    node = f"node-{n}"
    return Alert(id=f"gpu_temp_high/sim/{node}/gpu1/{n}", rule="gpu_temp_high",
                 severity=severity, cluster="sim", rack=f"rack-{n // 2}", node=node,
                 device="gpu1", state="firing", started_ts=now - 600 - n,
                 updated_ts=now - 2, value=90.0, message=f"GPU 1 on {node} at 90 °C",
                 fired_ts=now - 540 - n)


def _store(path: Path, now: float) -> None:
    store = SqliteStore(path)
    store.write([Frame("sim", f"rack-{n // 2}", f"node-{n}", now - 5, tuple(
        GpuReading(g, f"GPU-{n}-{g}", "H100", {
            "gpu_temp_c": 50.0 + g, "gpu_power_w": 300.0, "gpu_util_pct": 90.0})
        for g in range(8)), seq=1) for n in range(NODES)])
    # More warnings than the fleet page shows, and a few criticals among them.
    store.write_alerts([_alert(n, now, "critical" if n % 7 == 0 else "warning")
                        for n in range(0, 60, 2)])
    store.close()


def test_firing_alerts_are_on_the_first_screen_of_a_big_fleet(dash_duo, tmp_path: Path
                                                              ) -> None:
    now = time.time()
    _store(tmp_path / "store.db", now)
    dash_duo.driver.set_window_size(1920, 1080)
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "store.db", read_only=True),
                                     refresh_s=5.0))
    dash_duo.wait_for_element("#active-alerts tr.alert-row", timeout=20)
    dash_duo.wait_for_element("#fleet-heatmap .heatmaplayer .hm", timeout=20)
    time.sleep(0.5)
    at = dash_duo.driver.execute_script(_FIRST_ROW_JS)
    assert at["row"] <= at["view"], at  # was 4,357 px down a 937 px window
    assert at["heat"] > at["row"], at   # the alerts come before the heatmap
    rows = texts(dash_duo, "#active-alerts tr.alert-row td.sev")
    assert len(rows) == alert_tables.FLEET_SHOWN
    assert rows[:5] == ["critical"] * 5  # the 5 criticals first (0, 14, 28, 42, 56)
    assert set(texts(dash_duo, "#active-alerts tr.alert-row td.node")[:5]) == {
        "node-0", "node-14", "node-28", "node-42", "node-56"}
    assert all(texts(dash_duo, "#active-alerts tr.alert-row td.since"))
    more = texts(dash_duo, "#active-alerts tr.more-row")
    assert more and "20 more" in more[0], more
    assert dash_duo.find_element("#fleet-alerts-link").get_attribute("href").endswith("/alerts")
    # Every node's row drawn (read again until then: a value read once never changes).
    until(lambda: len(dash_duo.driver.execute_script(_Y_JS) or ()) == NODES, timeout=30)
    ys = dash_duo.driver.execute_script(_Y_JS)[::-1]  # the first node is on top
    assert ys[:3] == ["node-0", "node-1", "node-2"]
    assert ys.index("node-20") < ys.index("node-200")  # rack-10 before rack-100
    assert ys.index("node-4") < ys.index("node-20")    # rack-2 before rack-10
    assert dash_duo.get_logs() == []
