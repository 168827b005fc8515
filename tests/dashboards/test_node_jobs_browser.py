"""The node page's jobs in headless Chromium over a SQLite store a processor wrote: a node
that reports shows its jobs now; one silent for 4 h shows the job it last named as last
seen, not as running now; after a second run on the store (``up --keep``) one job per GPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import create_app
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.test_browser import texts

pytestmark = pytest.mark.browser


def _frames(node: str, start: float, job: str, n: int = 5) -> list[Frame]:
    return [Frame("sim", "rack-0", node, start + 10 * k, tuple(
        GpuReading(g, f"GPU-{node}-{g}", "H100", {"gpu_temp_c": 50.0, "gpu_power_w": 300.0,
                                                   "gpu_util_pct": 90.0}, job=job)
        for g in range(8)), seq=k) for k in range(n)]


def test_jobs_now_only_while_the_node_names_them(dash_duo, tmp_path: Path) -> None:
    now = time.time()
    store = SqliteStore(tmp_path / "s.db")
    Processor(store).process(_frames("node-253", now - 4 * 3600 - 60, "4001901")
                             + _frames("node-001", now - 900, "4000001"))
    # A second run on the store: node-001 now runs job 4000002 on the same GPUs.
    Processor(store).process(_frames("node-001", now - 60, "4000002"))
    store.close()
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "s.db", read_only=True),
                                     refresh_s=5.0))
    dash_duo.driver.get(dash_duo.server_url + "/node/node-001")
    dash_duo.wait_for_element("#node-jobs a.job-link", timeout=20)
    until(lambda: texts(dash_duo, "#node-jobs")[0].startswith("Jobs now"), timeout=10)
    assert texts(dash_duo, "#node-jobs a.job-link") == ["job 4000002"]  # was 4000001 too
    dash_duo.driver.get(dash_duo.server_url + "/node/node-253")
    dash_duo.wait_for_element("#node-jobs a.job-link", timeout=20)
    line = texts(dash_duo, "#node-jobs")[0]
    assert line.startswith("No data from it in this range · last job seen: job 4001901"), line
    assert "now" not in line
    assert dash_duo.get_logs() == []


def test_node_graphs_say_the_store_is_away_instead_of_loading(dash_duo, tmp_path: Path
                                                              ) -> None:
    # A dashboard started before `fleetwatch up`/`simulate` made the store: the banner says
    # so, and the graphs say there is no data, as the fleet page does, not "Loading…".
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "absent.db", read_only=True),
                                     refresh_s=2.0))
    dash_duo.driver.get(dash_duo.server_url + "/node/node-001?gpu=3")
    dash_duo.wait_for_contains_text("#node-notice", "no store at", timeout=15)
    graphs = ("#node-graph-gpu_temp_c", "#node-graph-gpu_power_w", "#node-graph-gpu_util_pct")

    def said() -> list[str]:
        return [" ".join(texts(dash_duo, f"{g} .annotation-text")) for g in graphs]

    until(lambda: all("Store unavailable" in t for t in said()), timeout=10)
    assert not any("Loading" in t for t in said()), said()
    assert dash_duo.get_logs() == []
