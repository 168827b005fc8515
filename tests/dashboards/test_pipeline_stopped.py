"""A stopped processor (agents still sending into Kafka) is said on the pages within a
minute, as fast as node_silent says a silent node: the fleet's "Data as of" tile in the warn
colour and every count "as of" its time, the alerts page's banner naming the processor and
its /healthz; and a node judged silent shows its jobs as last seen, not as now."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import alert_tables, create_app, data, job, summary_strip
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.fakes import NOW, FakeStore, alert, point
from tests.dashboards.test_browser import texts
from tests.dashboards.test_data import text_of


def _tiles(age_s: float) -> dict[str, tuple[str, str]]:
    store = FakeStore(points=[point("gpu_temp_c", "node-a", 0, 60, age_s=age_s),
                              point("gpu_temp_c", "node-a", 1, 61, age_s=age_s)],
                      alert_rows=[alert("node-a", 1, "firing")])
    return {t.id: (text_of(t), t.className)
            for t in summary_strip.summary(data.read_fleet(store, NOW), NOW)}


def test_the_summary_says_its_counts_are_as_of_the_last_data_after_a_minute() -> None:
    live = _tiles(10)
    assert "warn" not in live["summary-asof"][1] and "as of" not in live["summary-reporting"][0]
    stopped = _tiles(150)  # under the 5 min after which the GPUs leave the heatmap
    text, cls = stopped["summary-asof"]
    assert "warn" in cls and "2 min ago" in text and "is the processor running?" in text
    reporting = stopped["summary-reporting"]
    assert "2" in reporting[0].split() and "as of" in reporting[0] and "warn" in reporting[1]
    assert "as of" in stopped["summary-firing"][0] and "1 critical" in stopped["summary-firing"][0]


def test_the_lag_notice_names_the_processor_and_its_health_endpoint() -> None:
    assert alert_tables.lag_notice(NOW - 30, NOW, "n") is None
    assert alert_tables.lag_notice(None, NOW, "n") is None  # an empty store waits
    said = alert_tables.lag_notice(NOW - 180, NOW, "n")
    assert said is not None and "stale" in said.className
    assert said.children.startswith("No new data for 3 min")
    assert "`fleetwatch process`" in said.children and "/healthz" in said.children


def test_a_node_judged_silent_shows_its_jobs_as_last_seen() -> None:
    jobs = {g: "4000005" for g in range(8)}
    seen = int((NOW - 120) * 1000)  # silent for 2 min: under STALE_S, yet node_silent fired
    assert text_of(job.jobs_line(jobs, seen_ms=seen, now_s=NOW)).startswith("Jobs now:")
    line = text_of(job.jobs_line(jobs, seen_ms=seen, now_s=NOW, silent=True))
    assert line.startswith("No data since") and "last job seen:" in line and "now" not in line


def _frames(node: str, end: float, job_id: str) -> list[Frame]:
    return [Frame("sim", "rack-0", node, end - 10 * k, tuple(
        GpuReading(g, f"GPU-{node}-{g}", "H100", {"gpu_temp_c": 50.0 + g}, job=job_id)
        for g in range(8)), seq=5 - k) for k in range(5, -1, -1)]


def _alert(rule: str, node: str, device: str, since: float, severity: str) -> Alert:
    return Alert(f"{rule}/sim/{node}/{device}/{int(since)}", rule, severity, "sim", "rack-0",
                 node, device, "firing", since, since, 1.0, f"{rule} on {node}",
                 fired_ts=since)


@pytest.mark.browser
def test_pages_say_the_pipeline_stopped(dash_duo, tmp_path: Path) -> None:
    now = time.time()
    store = SqliteStore(tmp_path / "s.db")
    # Every processor stopped 2.5 min ago; node-004 had gone silent 30 s before.
    Processor(store).process(_frames("node-001", now - 150, "4000001")
                             + _frames("node-004", now - 180, "4000005"))
    store.write_alerts([_alert("gpu_temp_high", "node-001", "gpu3", now - 400, "warning"),
                        _alert("node_silent", "node-004", "host", now - 160, "critical")])
    store.close()
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "s.db", read_only=True),
                                     refresh_s=2.0))
    dash_duo.wait_for_element("#summary-asof", timeout=20)
    until(lambda: "warn" in dash_duo.find_element("#summary-asof").get_attribute("class"),
          timeout=10)
    assert "is the processor running?" in texts(dash_duo, "#summary-asof")[0]
    assert "as of" in texts(dash_duo, "#summary-reporting")[0]
    dash_duo.driver.get(dash_duo.server_url + "/alerts")
    dash_duo.wait_for_element("#alerts-lag", timeout=20)
    lag = texts(dash_duo, "#alerts-lag")[0]
    assert lag.startswith("No new data for 2 min") and "/healthz" in lag, lag
    dash_duo.driver.get(dash_duo.server_url + "/node/node-004?cluster=sim")
    dash_duo.wait_for_element("#node-jobs a.job-link", timeout=20)
    line = texts(dash_duo, "#node-jobs")[0]
    assert line.startswith("No data since") and "last job seen: job 4000005" in line, line
    assert dash_duo.get_logs() == []
