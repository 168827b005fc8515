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
