"""Two clusters that both have a node001, in headless Chromium over a SQLite store: the
fleet page shows two machines (the hot one too), a bare ``/node/node001`` asks which one,
the node page of each draws its own GPUs, the alert table names the cluster, and the
cluster picker filters the fleet and stays in the address."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import create_app
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.test_browser import click, texts, tile_value

pytestmark = pytest.mark.browser
HOT_C, COOL_C = 95.0, 61.0
_Y_JS = "return document.querySelector('#fleet-heatmap .js-plotly-plot').data[0].y;"
_Z_JS = "return document.querySelector('#fleet-heatmap .js-plotly-plot').data[0].z;"
_LINE_JS = """const d = document.querySelector('#node-graph-gpu_temp_c .js-plotly-plot').data;
    return d.filter(t => t.name === 'GPU 3').map(t => t.y.filter(v => v !== null));"""


def _store(path: Path, now: float) -> SqliteStore:
    """node001 of c-east (GPU 3 at 95 °C, gpu_temp_critical firing) and of c-west (61 °C),
    sampled alternately, as a shared consumer group writes them."""
    store = SqliteStore(path)
    frames = []
    for k in range(30):
        for cluster, hot in (("c-east", HOT_C), ("c-west", COOL_C)):
            frames.append(Frame(cluster, "r1", "node001", now - 60 + 2 * k, tuple(
                GpuReading(g, f"GPU-{cluster}-{g}", "H100", {
                    "gpu_temp_c": hot if g == 3 else 50.0, "gpu_power_w": 300.0,
                    "gpu_util_pct": 90.0}) for g in range(4)), seq=k))
    store.write(frames)
    store.write_alerts([Alert(
        id="gpu_temp_critical/c-east/node001/gpu3/1", rule="gpu_temp_critical",
        severity="critical", cluster="c-east", rack="r1", node="node001", device="gpu3",
        state="firing", started_ts=now - 50, updated_ts=now - 2, value=HOT_C,
        message="GPU 3 on node001 at 95 °C", fired_ts=now - 40)])
    return store


def test_same_named_nodes_of_two_clusters_in_the_browser(dash_duo, tmp_path: Path) -> None:
    now = time.time()
    _store(tmp_path / "store.db", now).close()
    reader = SqliteStore(tmp_path / "store.db", read_only=True)
    dash_duo.start_server(create_app(reader, refresh_s=2.0))

    # The fleet: two rows, 8 GPUs on 2 nodes, the hottest GPU is c-east's at 95 °C.
    dash_duo.wait_for_element("#fleet-heatmap .heatmaplayer .hm", timeout=15)
    until(lambda: texts(dash_duo, "#summary-reporting .tile-value") == ["8"], timeout=10)
    assert texts(dash_duo, "#summary-reporting .tile-detail") == ["on 2 nodes"]
    assert tile_value(dash_duo, "summary-hottest") == "95°C"
    assert texts(dash_duo, "#summary-hottest .tile-detail") == ["c-east/node001 · GPU 3"]
    ys = dash_duo.driver.execute_script(_Y_JS)
    assert sorted(ys) == ["c-east/node001", "c-west/node001"]
    z = dash_duo.driver.execute_script(_Z_JS)
    assert z[ys.index("c-east/node001")][3] == HOT_C
    assert z[ys.index("c-west/node001")][3] == COOL_C
    # The alert table names the cluster, and its link opens that cluster's node001.
    assert "Cluster" in texts(dash_duo, "#active-alerts th")
    assert texts(dash_duo, "#active-alerts td.cluster") == ["c-east"]
    # Picking a cluster filters the fleet and writes it into the address.
    dash_duo.select_dcc_dropdown("#fleet-cluster", value="c-east")
    until(lambda: dash_duo.driver.current_url.endswith("/?range=1h&cluster=c-east"),
          timeout=10)
    until(lambda: texts(dash_duo, "#summary-reporting .tile-value") == ["4"], timeout=10)
    assert dash_duo.driver.execute_script(_Y_JS) == ["node001"]
    assert tile_value(dash_duo, "summary-hottest") == "95°C"

    # A bare /node/node001 lists both clusters instead of drawing them as one.
    dash_duo.driver.get(dash_duo.server_url + "/node/node001")
    dash_duo.wait_for_element("#node-clusters a.cluster-link", timeout=15)
    assert texts(dash_duo, "#node-clusters a.cluster-link") == [
        "node001 in cluster c-east", "node001 in cluster c-west"]
    click(dash_duo, "#node-clusters a.cluster-link:nth-of-type(2)")
    until(lambda: dash_duo.driver.current_url.endswith("/node/node001?cluster=c-west"),
          timeout=10)
    dash_duo.wait_for_contains_text("#node-title", "c-west", timeout=10)
    dash_duo.wait_for_element("#node-graph-gpu_temp_c .scatterlayer .trace", timeout=15)
    # c-west's GPU 3 only: one steady line at 61 °C, not a line flipping to 95 °C.
    until(lambda: dash_duo.driver.execute_script(_LINE_JS), timeout=10)
    (line,) = dash_duo.driver.execute_script(_LINE_JS)
    assert len(line) == 30 and set(line) == {COOL_C}
    assert texts(dash_duo, "#node-alerts #node-alert-table-empty") != []

    # A cluster that has no node001 (an old link): the page says where it reports.
    dash_duo.driver.get(dash_duo.server_url + "/node/node001?cluster=c-north")
    dash_duo.wait_for_element("#node-elsewhere a.cluster-link", timeout=15)
    assert "No data from c-north/node001" in dash_duo.find_element("#node-elsewhere").text
    assert texts(dash_duo, "#node-elsewhere a.cluster-link") == [
        "node001 in cluster c-east", "node001 in cluster c-west"]

    # The cluster picker on the fleet page: c-west only, kept in the address.
    dash_duo.driver.get(dash_duo.server_url + "/?cluster=c-west")
    until(lambda: texts(dash_duo, "#summary-reporting .tile-value") == ["4"], timeout=15)
    assert tile_value(dash_duo, "summary-hottest") == "61°C"
    assert dash_duo.driver.execute_script(_Y_JS) == ["node001"]
    assert "c-west" in dash_duo.find_element("#fleet-cluster").text  # the picker says so
    assert dash_duo.find_element("#fleet-alerts-link").get_attribute("href").endswith(
        "/alerts?range=24h&cluster=c-west")
    click(dash_duo, "#fleet-alerts-link")
    until(lambda: dash_duo.driver.current_url.endswith("/alerts?range=24h&cluster=c-west"),
          timeout=10)
    dash_duo.wait_for_element("#active-alert-table-empty", timeout=10)
    # The utilization and energy pages take the cluster from the address too.
    dash_duo.driver.get(dash_duo.server_url + "/utilization?range=1h&cluster=c-west")
    dash_duo.wait_for_text_to_equal("#util-scope-text", "cluster c-west", timeout=10)
    until(lambda: "c-west" in dash_duo.find_element("#util-cluster").text, timeout=10)
    dash_duo.wait_for_element("#util-cdf-gpu_power_w .scatterlayer .trace", timeout=15)
    assert texts(dash_duo, "#util-cdf-gpu_power_w .legendtext") in ([], ["c-west"])
    dash_duo.driver.get(dash_duo.server_url + "/energy?range=7d&cluster=c-east")
    until(lambda: "c-east" in dash_duo.find_element("#energy-cluster").text, timeout=10)
    dash_duo.wait_for_element("#energy-updated", timeout=10)
    assert dash_duo.get_logs() == []
