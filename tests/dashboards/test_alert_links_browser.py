"""The link Alertmanager gets for an alert (its ``generatorURL``), opened in headless
Chromium, lands on the page about the alert: the node page of the GPU's cluster with the
GPU brought forward, and for a rack alert the fleet page of the rack's cluster."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import create_app
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.test_browser import texts
from tests.dashboards.test_clusters_browser import _store
from tests.servers import alertmanager

pytestmark = pytest.mark.browser


def _links(address: str, cluster: str) -> list[str]:
    url = f"http://{address}/api/v2/alerts?filter=" + urllib.parse.quote(f'cluster="{cluster}"')
    with urllib.request.urlopen(url, timeout=5) as r:
        return sorted(a["generatorURL"] for a in json.load(r))


def test_alertmanager_links_open_the_gpu_and_the_racks_cluster(dash_duo, tmp_path: Path
                                                                ) -> None:
    now = time.time()
    store = _store(tmp_path / "store.db", now)
    (gpu_alert,) = store.alerts(("firing",))
    store.close()
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "store.db", read_only=True),
                                     refresh_s=2.0))
    rack_alert = Alert(id="rack_cooling/c-east/r1/1", rule="rack_cooling", severity="critical",
                       cluster="c-east", rack="r1", node="", device="rack:r1", state="firing",
                       started_ts=now - 30, updated_ts=now, value=7.0, message="Rack r1 hot",
                       fired_ts=now - 30)
    am = alertmanager(tmp_path / "am").start()
    try:
        sink = AlertmanagerSink(f"http://{am.address}", dashboard_url=dash_duo.server_url)
        sink.send([Notice(gpu_alert), Notice(rack_alert)])
        links = until(lambda: _links(am.address, "c-east"), timeout=10)
    finally:
        am.stop()
    base = dash_duo.server_url
    assert links == [f"{base}/?cluster=c-east", f"{base}/node/node001?cluster=c-east&gpu=3"]

    # The GPU's link: node001 of c-east (not c-west's), GPU 3 brought forward.
    dash_duo.driver.get(links[1])
    dash_duo.wait_for_contains_text("#node-title", "c-east", timeout=15)
    assert texts(dash_duo, "#node-focus") == ["GPU 3"]
    # The rack's link: the fleet page of c-east only.
    dash_duo.driver.get(links[0])
    until(lambda: texts(dash_duo, "#summary-reporting .tile-value") == ["4"], timeout=15)
    assert "c-east" in dash_duo.find_element("#fleet-cluster").text
