"""InfluxDB's own limits against a real influxd 1.6.7: a short retention policy, another
writer's field types, ``max-series-per-database``.

What the server keeps is stored; what it refuses for good is counted and said, and
never stops the processor, nor its alerts: frames are committed, and judged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import StoreRejected
from fleetwatch.pipeline.store.influx_schema import conflicts, refused_conflict
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.window import AcceptWindow
from tests.core.test_processor_hardening import DEAD, TOPIC, Running, send, wait_for
from tests.servers import Server
from tests.store.conftest import influxdb_v1
from tests.store.helpers import cluster_name

HOUR_MS = 3_600_000


def influxql(address: str, q: str, database: str | None = None) -> dict:
    params = {"q": q, **({"db": database} if database else {})}
    request = urllib.request.Request(
        f"http://{address}/query?{urllib.parse.urlencode(params)}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())


def write_raw(address: str, database: str, body: str) -> None:
    request = urllib.request.Request(
        f"http://{address}/write?{urllib.parse.urlencode({'db': database, 'precision': 'ms'})}",
        data=body.encode(), method="POST")
    # A write over the series limit is refused: the test fills the limit that way.
    with contextlib.suppress(urllib.error.HTTPError):
        urllib.request.urlopen(request, timeout=10).read()


def count(address: str, database: str, q: str) -> int:
    series = influxql(address, q, database)["results"][0].get("series", [])
    return int(series[0]["values"][0][1]) if series else 0


def live(cluster: str, node: str, ts: float, temp: float = 50.0,
         job: str | None = None) -> Frame:
    return Frame(cluster, "r1", node, ts, (GpuReading(0, f"GPU-{node}", "H100", {
        "gpu_temp_c": temp, "gpu_power_w": 300.0}, job=job),),
        HostReading({"host_cpu_util_pct": 5.0}))


# -- a short retention policy (defect: every frame of a 1 h RP refused) ----------------
def test_the_window_keeps_nine_tenths_of_a_short_retention() -> None:
    now = 10 * 86_400_000
    hour = AcceptWindow(HOUR_MS, None, "1 h")
    low, _ = hour.bounds(now)
    assert low == now - HOUR_MS + HOUR_MS // 10  # 54 min back, not "from now"
    two = AcceptWindow(2 * HOUR_MS, 2 * 86_400_000, "2 h")
    assert two.bounds(now) == (now - 2 * HOUR_MS + 12 * 60_000, now + 2 * 86_400_000 - HOUR_MS)
    assert AcceptWindow(30 * 86_400_000, None, "30 d").bounds(now)[0] == \
        now - 30 * 86_400_000 + HOUR_MS  # the full margin where there is room
    assert hour.too_short() is None
    said = AcceptWindow(5 * 60_000, None, "retention policy 'tiny'").too_short()
    assert said is not None and "300 s" in said and "'tiny'" in said


def test_a_one_hour_retention_policy_stores_live_frames(influxdb: Server) -> None:
    database = f"h1_{cluster_name().replace('-', '_')}"
    influxql(influxdb.address, f'CREATE DATABASE "{database}" WITH DURATION 1h '
                               "REPLICATION 1 SHARD DURATION 1h NAME short1h")
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=database, api="v1")
    assert store.check_server() == []  # 1 h is enough: the processor starts
    cluster, now = cluster_name(), time.time()
    fresh = [live(cluster, "n1", now - 5), live(cluster, "n1", now - 50 * 60)]
    assert store.write(fresh) == 2 * 3
    with pytest.raises(StoreRejected, match="short1h") as refused:
        store.write([live(cluster, "n1", now - 59 * 60)])  # InfluxDB drops it soon
    assert refused.value.about_frames
    assert count(influxdb.address, database, "SELECT count(temp_c) FROM gpu") == 2
    store.close()


# -- another writer's field types ---------------------------------------------------
CONFLICT = ('{"error":"partial write: field type conflict: input field \\"power_w\\" on '
            'measurement \\"gpu\\" is type float, already exists as type integer dropped=25"}')


def test_field_types_fleetwatch_does_not_write_are_found() -> None:
    rows = [("gpu", "temp_c", "integer"), ("gpu", "power_w", "float"),
            ("gpu", "their_own", "integer"), ("cpu", "usage_user", "integer"),
            ("fleetwatch_event", "value", "string"), ("fleetwatch_alert", "count", "boolean")]
    assert conflicts(rows) == [("gpu", "temp_c", "integer"),
                               ("fleetwatch_alert", "count", "boolean")]
    assert refused_conflict(CONFLICT) == ("gpu", "power_w")
    assert refused_conflict("HTTP 400: unable to parse") is None


def test_another_writers_integer_field_warns_at_start_and_alerts_still_flow(
        influxdb: Server, caplog: pytest.LogCaptureFixture) -> None:
    database = f"tc_{cluster_name().replace('-', '_')}"
    influxql(influxdb.address, f'CREATE DATABASE "{database}"')
    write_raw(influxdb.address, database,
              "gpu,cluster=other,node=telegraf-host,device=gpu0 temp_c=65i,power_w=300i")
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=database, api="v1")
    caplog.set_level(logging.WARNING)
    assert store.check_server() == [("gpu", "power_w", "integer"), ("gpu", "temp_c", "integer")]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "gpu.power_w is integer" in said and "DROP SHARD" in said
    bus = MemoryBus()
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)],
                          dead_letters=bus.producer(), dead_letter_topic=DEAD)
    cluster, now = cluster_name(), time.time()
    with Running(bus, processor, batch=10) as run:
        send(bus, [live(cluster, "n3", now - 20 + i, 95.0) for i in range(12)])
        wait_for(lambda: bus._committed.get((TOPIC, "g")) == 12)
        assert run.thread.is_alive()
    assert len(bus.messages(DEAD)) == 12  # InfluxDB kept none of their GPU readings
    reason = dict(bus.messages(DEAD)[0].headers)["reason"].decode()
    assert "field type conflict" in reason and "DROP SHARD" in reason
    # ... and yet the hot GPU is alerted, and the alert stored.
    assert [(a.node, a.rule) for a in processor.alerts.open] == [("n3", "gpu_temp_high")]
    assert [a.node for a in store.alerts() if a.cluster == cluster] == ["n3"]
    assert processor.stats.errors == 0
    store.close()


# -- max-series-per-database (defect: the events write refused wedged the processor) ----
def test_the_series_limit_refusing_events_does_not_wedge_the_processor(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = influxdb_v1(tmp_path, max_series=200).start()
    try:
        influxql(server.address, 'CREATE DATABASE "fleetwatch"')
        store = InfluxQLStore(f"http://{server.address}", bucket="fleetwatch", api="v1")
        cluster, now = cluster_name(), time.time()
        nodes = [f"n{i}" for i in range(4)]
        store.write([live(cluster, n, now - 120) for n in nodes])  # their series exist
        for i in range(200):  # and the rest of the limit is taken (a request over it
            write_raw(server.address, "fleetwatch", f"other,host=h{i} v=1")  # is refused whole)
        bus = MemoryBus()
        processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)],
                              dead_letters=bus.producer(), dead_letter_topic=DEAD)
        frames = [live(cluster, n, now - 60 + t, 95.0 if n == "n3" else 50.0,
                       job=f"job-{n}-{t // 5}") for t in range(20) for n in nodes]
        caplog.set_level(logging.WARNING, "fleetwatch.pipeline.processor")
        with Running(bus, processor, batch=20) as run:
            send(bus, frames)
            wait_for(lambda: bus._committed.get((TOPIC, "g")) == len(frames), 60)
            assert run.thread.is_alive()
        # The frames (series known) are stored; the events (new series) are not, counted.
        assert count(server.address, "fleetwatch",
                     f"SELECT count(temp_c) FROM gpu WHERE cluster = '{cluster}'") == 4 + 80
        assert processor.stats.records_refused.get("events", 0) > 0
        assert processor.stats.errors == 0 and bus.messages(DEAD) == []
        assert [(a.node, a.rule) for a in processor.alerts.open] == [("n3", "gpu_temp_high")]
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "max-series-per-database limit exceeded" in said
        assert "raise max-series-per-database" in said
        store.close()
    finally:
        server.stop()


def test_the_processor_checks_the_server_at_start(caplog: pytest.LogCaptureFixture) -> None:
    """``_check_server`` (``fleetwatch process``): a retention too short stops the start
    with its reason; a server away now is a warning (frames wait for it)."""
    from fleetwatch.config import ConfigError
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.pipeline.store.victoria import StoreMisconfigured
    from fleetwatch.process_service import _check_server

    class Short:
        def check_server(self) -> None:
            raise StoreMisconfigured(AcceptWindow(300_000, None, "policy 'p'").too_short() or "")

    class Away:
        def check_server(self) -> None:
            raise StoreError("connection refused")

    with pytest.raises(ConfigError, match="keeps only 300 s.*policy 'p'"):
        _check_server(Short())
    caplog.set_level(logging.WARNING)
    _check_server(Away())
    _check_server(object())  # a store without the check (SQLite)
    assert "cannot check the store server's set-up yet (connection refused)" in caplog.text
