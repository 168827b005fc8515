"""InfluxDB 1.x refuses a time literal past what int64 nanoseconds hold (year 2262):
``time < 1000000000000000000000ms`` is "invalid duration". `fleetwatch alerts` asked for
the notifications of its alerts up to 1e18 s, and so failed (and the dashboard's Alerts
page said "Store unavailable") whenever an alert was open."""

from __future__ import annotations

import time

import pytest

from fleetwatch.cli import main
from fleetwatch.dashboards import data
from fleetwatch.pipeline.store.base import Alert, Annotation, Event, Notification
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from tests.servers import Server
from tests.store.conftest import DATABASE
from tests.store.helpers import cluster_name


def _open_alert(cluster: str, now: float) -> tuple[Alert, Notification]:
    a = Alert(f"node_silent/{cluster}/n1/host/{int(now * 1000)}", "node_silent", "critical",
              cluster, "r1", "n1", "host", "firing", now - 60, now, 65.0,
              "n1 has sent nothing for 65 s", fired_ts=now)
    note = Notification(now - 1, now - 0.5, "webhook", a.id, a.rule, a.severity, cluster,
                        a.rack, a.node, a.device, "firing", "sent")
    return a, note


def test_reads_of_any_window_are_answered(influxdb: Server) -> None:
    """An end (or a start) past what the server takes reads as far as it goes."""
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=DATABASE, api="v1")
    cluster, now = cluster_name(), time.time()
    a, note = _open_alert(cluster, now)
    event = Event(now - 2, "node_state", cluster, "r1", "n1", "host", value="up")
    mark = Annotation("maintenance", now - 3, None, "n1", "host", "drain", cluster)
    store.write_alerts([a])
    store.write_notifications([note])
    store.write_events([event])
    store.write_annotations([mark])
    try:
        for end in (1e18, float("inf")):
            assert [n for n in store.notifications(now - 60, end, [a.id])] == [note]
            assert [e for e in store.events(-1e18, end) if e.cluster == cluster] == [event]
            assert [m for m in store.annotations(now - 60, end)
                    if m.cluster == cluster] == [mark]
        assert store.newest_ms("gpu_temp_c", -10**21, 10**21, cluster) is None
        assert store.range("gpu_temp_c", 0, 10**21, cluster=cluster) == []
    finally:
        store.close()


def test_alerts_and_the_alerts_page_list_an_open_alert_with_its_notifications(
        influxdb: Server, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=DATABASE, api="v1")
    cluster, now = cluster_name(), time.time()
    a, note = _open_alert(cluster, now)
    store.write_alerts([a])
    store.write_notifications([note])
    try:
        assert data.read_record(store, [a], now) == ({}, {a.id: [note]})
    finally:
        store.close()
    monkeypatch.delenv("FLEETWATCH_CONFIG", raising=False)
    monkeypatch.setenv("FLEETWATCH_STORE_KIND", "influx")
    monkeypatch.setenv("FLEETWATCH_STORE_URL", f"http://{influxdb.address}")
    monkeypatch.setenv("FLEETWATCH_STORE_BUCKET", DATABASE)
    monkeypatch.setenv("FLEETWATCH_STORE_INFLUX_API", "v1")
    assert main(["alerts", "--cluster", cluster]) == 0
    out = capsys.readouterr().out
    assert a.id in out and "sent to webhook" in out
