"""The alerts page says staleness per cluster: one cluster's data that stopped an hour
ago is not hidden by another cluster of the same store that is live; with a cluster
chosen, the stale banner of every page is that cluster's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch import alert_view
from fleetwatch.dashboards import alert_tables, create_app, fresh
from fleetwatch.dashboards import alerts as alerts_page
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.test_browser import texts
from tests.dashboards.test_data import text_of
from tests.dashboards.test_stale_banner import banner


def _alert(cluster: str, fired: float) -> Alert:
    return Alert(f"gpu_temp_high/{cluster}/node-001/gpu1/{int(fired)}", "gpu_temp_high",
                 "warning", cluster, "r1", "node-001", "gpu1", "firing", fired - 30, fired,
                 88.0, "GPU 1 on node-001 at 88 °C", fired_ts=fired)


def _two_clusters(db: Path, now: float) -> float:
    """east: data up to an hour ago, west: live; each a firing alert. When east ended."""
    s = SqliteStore(db)
    gpu = GpuReading(0, "GPU-0", "NVIDIA H100 80GB HBM3", {"gpu_temp_c": 60.0})
    east_end = now - 3600
    s.write([Frame("east", "r1", "node-001", east_end - k * 60, (gpu,), HostReading())
             for k in range(5)])
    s.write([Frame("west", "r1", "node-001", now + 30 - k * 15, (gpu,), HostReading())
             for k in range(8)])  # to half a minute past now: live while the test runs
    s.write_alerts([_alert("east", east_end - 1800), _alert("west", now - 600)])
    s.close()
    return east_end


def test_the_page_reads_each_clusters_staleness(tmp_path: Path) -> None:
    now = time.time()
    east_end = _two_clusters(tmp_path / "two.db", now)
    s = SqliteStore(tmp_path / "two.db", read_only=True)
    active = [_alert("east", east_end - 1800), _alert("west", now - 600)]
    ended, newest, per = alerts_page.staleness(s, active, now, None)
    assert ended == {"east": pytest.approx(east_end, abs=0.01)}
    assert per["west"] == pytest.approx(now, abs=1)
    said = text_of(alerts_page.stale_notices(ended, newest, per, now))
    assert said.startswith("east: No data since") and "west" not in said
    table = text_of(alert_tables.alert_table(active, now, "t", ended=ended))
    assert table.count("open when the data ended") == 1
    ended, newest, per = alerts_page.staleness(s, active[:1], now, "east")
    assert ended == pytest.approx(east_end, abs=0.01) and per == {}
    assert alerts_page.staleness(s, active[1:], now, "west")[0] is None
    east = fresh.check(s, now, 5.0, cluster="east")
    assert east["newest_ms"] == pytest.approx(east_end * 1000, abs=1)
    assert east["cluster"] == "east"
    s.close()


def test_a_stopped_cluster_with_no_alert_shown_is_named(tmp_path: Path) -> None:
    """Only the clusters of the alerts shown were asked: east, whose data stopped an hour
    ago and which has no open alert, went unsaid while west's alert was listed."""
    now = time.time()
    _two_clusters(tmp_path / "two.db", now)
    s = SqliteStore(tmp_path / "two.db", read_only=True)
    clusters = alert_view.store_clusters(s, now)
    assert clusters == {"east", "west"}
    for active in ([_alert("west", now - 600)], []):
        ended, newest, per = alerts_page.staleness(s, active, now, None, clusters)
        assert ended == {} and set(per) == {"east", *(a.cluster for a in active)}
        said = text_of(alerts_page.stale_notices(ended, newest, per, now))
        assert said.startswith("east: No new data for ") and "west:" not in said
    # One cluster chosen: that one's alone.
    assert alerts_page.staleness(s, [], now, "west", clusters)[2] == {}
    s.close()


@pytest.mark.browser
def test_a_stopped_cluster_is_named_while_another_is_live(dash_duo, tmp_path: Path) -> None:
    _two_clusters(tmp_path / "two.db", time.time())
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "two.db", read_only=True),
                                     refresh_s=2.0))
    dash_duo.driver.get(dash_duo.server_url + "/alerts")
    dash_duo.wait_for_element("#active-alert-table", timeout=20)
    until(lambda: texts(dash_duo, "#alerts-notice .notice"), timeout=10)
    (said,) = texts(dash_duo, "#alerts-notice .notice")
    assert said.startswith("east: No data since") and "(60 min ago)" in said, said
    (ended_note,) = texts(dash_duo, "#active-alert-table .ended-note")
    assert ended_note.startswith("open when the data ended")
    assert banner(dash_duo, "alerts") == ""  # every cluster: west is live
    # east chosen: its alerts as the data left them, and the stale banner is east's.
    dash_duo.driver.get(dash_duo.server_url + "/alerts?cluster=east")
    until(lambda: "collectors are behind" in banner(dash_duo, "alerts"), timeout=20)
    (said,) = texts(dash_duo, "#alerts-notice .notice")
    assert said.startswith("No data since"), said
    # west chosen: live, nothing said.
    dash_duo.driver.get(dash_duo.server_url + "/alerts?cluster=west")
    dash_duo.wait_for_element("#active-alert-table", timeout=20)
    until(lambda: texts(dash_duo, "#active-alert-table .since"), timeout=10)
    assert texts(dash_duo, "#alerts-notice .notice") == []
    assert banner(dash_duo, "alerts") == ""
    assert dash_duo.get_logs() == []
