"""Nothing is counted or committed that the store did not take.

A frame the server would drop after answering 204 (outside its retention,
too far ahead) is refused by position before anything is sent; an answer
that will not change (4xx) is a ``StoreRejected`` with the server's reason;
one that may (5xx, 429, a timeout) is retried, then a ``StoreError``; a
VictoriaMetrics without dedup, on which every replay would duplicate
samples, is refused at open. The servers' own counters say what was kept.
"""

from __future__ import annotations

import http.server
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.pipeline.store.base import StoreError, StoreRejected
from fleetwatch.pipeline.store.influx import InfluxStore
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.victoria import StoreMisconfigured, VictoriaMetricsStore
from tests.servers import Server, victoria_metrics
from tests.store.conftest import DATABASE, influxdb_v1
from tests.store.helpers import (
    cluster_name,
    counters,
    force_flush,
    frames,
    minute_ago,
    settled_counters,
)

YEAR_MS = 365 * 86_400_000


def test_frames_years_ahead_are_refused_by_position_and_the_rest_stored(
        tmp_path: Path) -> None:
    server = victoria_metrics(tmp_path).start()
    try:
        store = VictoriaMetricsStore(f"http://{server.address}")
        cluster, t0 = cluster_name(), minute_ago(5)
        good = frames(cluster, t0, 3, nodes=2)
        ahead = frames(cluster, t0 + 3 * YEAR_MS, 1, nodes=2)  # a clock years ahead
        batch = [good[0], ahead[0], *good[1:4], ahead[1], *good[4:]]
        before = counters(server.address)
        with pytest.raises(StoreRejected, match="2 frame.*retentionPeriod=100y.*2 days ahead"
                           ) as refused:
            store.write(batch)
        assert refused.value.indices == (1, 5)
        rest = [f for i, f in enumerate(batch) if i not in refused.value.indices]
        points = store.write(rest)
        force_flush(server.address)
        after = settled_counters(server.address, before, points)
        # The server took every point sent, and dropped none: the refused ones were not sent.
        assert after["vm_rows_added_to_storage_total"] - before[
            "vm_rows_added_to_storage_total"] == points == 6 * (2 * 2 + 2)
        assert after['vm_rows_ignored_total{reason="big_timestamp"}'] == 0
        store.close()
    finally:
        server.stop()


def test_frames_behind_the_servers_retention_are_refused(tmp_path: Path) -> None:
    server = victoria_metrics(tmp_path, retentionPeriod="1y").start()
    try:
        store = VictoriaMetricsStore(f"http://{server.address}")
        cluster = cluster_name()
        old = frames(cluster, minute_ago(0) - 3 * YEAR_MS, 2, nodes=1)
        new = frames(cluster, minute_ago(5), 2, nodes=1)
        before = counters(server.address)
        with pytest.raises(StoreRejected, match="retentionPeriod=1y") as refused:
            store.write([*new, *old])
        assert refused.value.indices == (2, 3)
        points = store.write(new)
        after = settled_counters(server.address, before, points)
        assert after["vm_rows_added_to_storage_total"] - before[
            "vm_rows_added_to_storage_total"] == points
        assert after['vm_rows_ignored_total{reason="small_timestamp"}'] == 0
        store.close()
    finally:
        server.stop()


def test_a_server_without_dedup_is_refused_with_how_to_fix_it(tmp_path: Path) -> None:
    server = victoria_metrics(tmp_path, **{"dedup.minScrapeInterval": None}).start()
    try:
        with pytest.raises(StoreMisconfigured, match="-dedup.minScrapeInterval=1ms"):
            VictoriaMetricsStore(f"http://{server.address}")
        server.stop()
        # Opened while the server is away: checked before the first write.
        store = VictoriaMetricsStore(f"http://{server.address}", max_retries=0)
        server.start()
        with pytest.raises(StoreMisconfigured, match="stored twice"):
            store.write(frames(cluster_name(), minute_ago(5), 1))
        store.close()
    finally:
        server.stop()


def test_influxdb_refusing_a_batch_is_permanent_with_its_reason(tmp_path: Path) -> None:
    """A field stored as a string cannot take a float (in the same shard): 400, the same
    every time. A server of its own: the conflict would refuse other tests' writes."""
    influxdb = influxdb_v1(tmp_path).start()
    try:
        _refused_by_influxdb(influxdb)
    finally:
        influxdb.stop()


def _refused_by_influxdb(influxdb: Server) -> None:
    query = urllib.parse.urlencode({"q": f'CREATE DATABASE "{DATABASE}"'})
    urllib.request.urlopen(urllib.request.Request(
        f"http://{influxdb.address}/query?{query}", method="POST"), timeout=10).read()
    cluster, t0 = cluster_name(), minute_ago(5)
    body = f'gpu,cluster={cluster},device=gpu0,node=node-0,rack=rack-0 temp_c="hot" {t0 - 1}'
    params = urllib.parse.urlencode({"db": DATABASE, "precision": "ms"})
    urllib.request.urlopen(urllib.request.Request(
        f"http://{influxdb.address}/write?{params}", data=body.encode(), method="POST"),
        timeout=10).read()
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=DATABASE, api="v1")
    started = time.monotonic()
    with pytest.raises(StoreRejected, match="400.*field type conflict") as refused:
        store.write(frames(cluster, t0, 1, nodes=1))
    assert refused.value.indices is None  # somewhere in the batch: the processor bisects
    assert time.monotonic() - started < 2  # not retried
    store.close()


class _Answers(http.server.BaseHTTPRequestHandler):
    """A write endpoint that answers each request with the next status of ``statuses``."""

    statuses: list[int] = []
    seen = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen += 1
        status = self.statuses.pop(0) if self.statuses else 204
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", "0")
        body = b"" if status == 204 else b'{"code":"x","message":"the server says no"}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answers() -> Iterator[tuple[str, type[_Answers]]]:
    handler = type("Handler", (_Answers,), {"statuses": [], "seen": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("statuses", "error", "match", "requests"), [
    ([400], StoreRejected, "HTTP 400.*the server says no", 1),
    ([413], StoreRejected, "HTTP 413", 1),
    ([503, 503, 503], StoreError, "after 3 attempts.*503", 3),
    ([401], StoreError, "401.*token", 1),   # misconfigured: nothing dead-lettered
    ([404], StoreError, "404.*store.url.*store.bucket", 1),
    ([429, 500, 204], None, "", 3),          # transient, then taken
])
def test_answers_are_told_apart(answers: tuple[str, type[_Answers]], statuses: list[int],
                                error: type[Exception] | None, match: str,
                                requests: int) -> None:
    url, handler = answers
    handler.statuses = list(statuses)
    store = InfluxStore(url, max_retries=2)
    store._writer.retry_interval_s = 0.01  # keep the test short; the policy is the same
    batch = frames(cluster_name(), minute_ago(5), 1)
    if error is None:
        assert store.write(batch) == len(batch) * 6
    else:
        with pytest.raises(error, match=match):
            store.write(batch)
    assert handler.seen == requests
    store.close()


def test_frames_older_than_influxdbs_retention_policy_are_refused(influxdb: Server) -> None:
    """InfluxDB would answer "partial write: points beyond retention policy dropped"."""
    database = f"short_{cluster_name().replace('-', '_')}"
    query = urllib.parse.urlencode({"q": f'CREATE DATABASE "{database}" WITH DURATION 2h'})
    urllib.request.urlopen(urllib.request.Request(
        f"http://{influxdb.address}/query?{query}", method="POST"), timeout=10).read()
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=database, api="v1")
    cluster = cluster_name()
    old = frames(cluster, minute_ago(0) - 5 * 3_600_000, 1, nodes=2)
    new = frames(cluster, minute_ago(5), 2, nodes=2)
    with pytest.raises(StoreRejected, match="retention policy 'autogen'.*2h0m0s") as refused:
        store.write([*old, *new])
    assert refused.value.indices == (0, 1)
    assert store.write(new) == 4 * 6
    got = store.range("gpu_temp_c", minute_ago(0) - 6 * 3_600_000, minute_ago(0))
    assert len([p for p in got if p[0].cluster == cluster]) == 4 * 2  # what the server kept
    store.close()
