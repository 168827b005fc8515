"""An alert on a GPU two jobs share links each job, and each link opens that job's page
(headless Chromium; r21 security review: it linked /job/111%2C222, which is no job)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import create_app
from fleetwatch.pipeline.store.base import Alert, Event
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.test_browser import texts

pytestmark = pytest.mark.browser


def test_each_job_of_a_shared_gpus_alert_opens_its_page(dash_duo, tmp_path: Path) -> None:
    now = time.time()
    store = SqliteStore(tmp_path / "s.db")
    store.write_events([Event(now - 900, "job_start", "sim", "r0", "n1", "gpu2",
                              value="111,222")])
    store.write_alerts([Alert(
        id="gpu_xid_critical/sim/n1/gpu2/1", rule="gpu_xid_critical", severity="critical",
        cluster="sim", rack="r0", node="n1", device="gpu2", state="firing",
        started_ts=now - 60, updated_ts=now - 5, value=79.0, fired_ts=now - 60,
        message="GPU 2 on n1 (job 111,222): XID 79 (fallen off the bus)")])
    store.close()
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "s.db", read_only=True),
                                     refresh_s=2.0))
    dash_duo.driver.get(dash_duo.server_url + "/alerts")
    until(lambda: texts(dash_duo, "a.job-link"), timeout=15)
    links = dash_duo.driver.execute_script(
        "return [...document.querySelectorAll('a.job-link')]"
        ".map(a => [a.textContent, a.getAttribute('href')])")
    assert sorted(set(map(tuple, links))) == [("job 111", "/job/111?cluster=sim"),
                                              ("job 222", "/job/222?cluster=sim")]
    dash_duo.find_elements("a.job-link")[1].click()
    dash_duo.wait_for_text_to_equal("#job-title", "222", timeout=15)
    # The job's page, not its "no such job": its GPU's node, and that it runs.
    dash_duo.wait_for_contains_text("body", "running", timeout=15)
    assert "No job 222" not in dash_duo.find_element("body").text
