"""A store URL with ``user:password@``: sent as HTTP basic auth, never printed.

VictoriaMetrics is put behind a small proxy that, like vmauth or nginx's
``auth_basic``, answers 401 to any request without the right credentials and
forwards the others to the real server; InfluxDB 1.x checks them itself. What
counts is what the server holds, and that the password is in no log line and
no error message.
"""

from __future__ import annotations

import base64
import http.server
import logging
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.config import ConfigError, Secret, StoreConfig
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.wiring import open_store, store_name
from tests.servers import Server, free_port
from tests.store.conftest import DATABASE, influxdb_v1
from tests.store.helpers import cluster_name, force_flush, frames, minute_ago
from tests.store.test_influx_api import influxql, sent_points, stored_points
from tests.store.test_victoria import export_new

PASSWORD = "s3cretPW"
GOOD = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()


class BasicAuthProxy:
    """A reverse proxy to ``upstream`` that requires ``admin:s3cretPW``; records what came."""

    def __init__(self, upstream: str) -> None:
        self.seen: list[tuple[str, str, int]] = []  # (method, path, status answered)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Authorization") != GOOD:
                    proxy.seen.append((self.command, self.path, 401))
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="vm"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() in ("content-type", "content-encoding")}
                request = urllib.request.Request(f"http://{upstream}{self.path}",
                                                 data=body or None, method=self.command,
                                                 headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=10) as r:
                        status, answer = r.status, r.read()
                except urllib.error.HTTPError as exc:
                    status, answer = exc.code, exc.read()
                proxy.seen.append((self.command, self.path, status))
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = _forward

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(victoria: Server) -> Iterator[BasicAuthProxy]:
    p = BasicAuthProxy(victoria.address)
    yield p
    p.close()


def test_victoriametrics_behind_basic_auth_gets_writes_and_reads(
        victoria: Server, proxy: BasicAuthProxy, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://admin:{PASSWORD}@{proxy.address}"
    store = open_store(StoreConfig(kind="victoriametrics", url=url))
    cluster, t0 = cluster_name(), minute_ago(5)
    try:
        store.write(frames(cluster, t0, 10, nodes=1, gpus=2))
        force_flush(victoria.address)
        got = [p for p in store.latest("gpu_temp_c", t0) if p[0].cluster == cluster]
        assert sorted(p[0].device for p in got) == ["gpu0", "gpu1"]
    finally:
        store.close()
    # The server holds every sample: 10 per GPU, asked of it directly.
    series = export_new(victoria.address, f'gpu_temp_c{{cluster="{cluster}"}}')
    assert sorted(len(s["values"]) for s in series) == [10, 10]
    assert proxy.seen and all(status != 401 for _, _, status in proxy.seen), proxy.seen
    assert {path.split("?")[0] for _, path, _ in proxy.seen} >= {
        "/flags", "/api/v2/write", "/api/v1/query"}
    assert PASSWORD not in caplog.text


def test_a_wrong_password_is_refused_and_named_masked(
        proxy: BasicAuthProxy, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://admin:wrong{PASSWORD}@{proxy.address}"
    store = open_store(StoreConfig(kind="victoriametrics", url=url))
    try:
        with pytest.raises(StoreError) as raised:
            store.write(frames(cluster_name(), minute_ago(5), 1, nodes=1))
    finally:
        store.close()
    message = str(raised.value)
    assert f"http://admin:***@{proxy.address}" in message and "401" in message
    assert PASSWORD not in message and PASSWORD not in caplog.text


def test_a_store_away_is_named_with_the_password_masked(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    port = free_port()  # nothing listens there
    config = StoreConfig(kind="victoriametrics", url=f"http://admin:{PASSWORD}@127.0.0.1:{port}")
    store = open_store(config)
    try:
        with pytest.raises(StoreError) as raised:
            store.write(frames(cluster_name(), minute_ago(5), 1, nodes=1))
    finally:
        store.close()
    message = str(raised.value)
    assert message.startswith(f"cannot read http://admin:***@127.0.0.1:{port}/flags: ")
    # Refused by the host, not "Name or service not known": the userinfo left the host name.
    assert "Connection refused" in message, message
    assert f"cannot read http://admin:***@127.0.0.1:{port}/flags yet" in caplog.text
    assert PASSWORD not in message and PASSWORD not in caplog.text
    assert store_name(config) == f"victoriametrics at http://admin:***@127.0.0.1:{port}"


def test_influxdb_1x_with_auth_takes_the_credentials_from_the_url(tmp_path: Path) -> None:
    server = influxdb_v1(tmp_path, auth=True).start()
    try:
        influxql(server.address, "CREATE USER admin WITH PASSWORD 'pw' WITH ALL PRIVILEGES")
        influxql(server.address, f'CREATE DATABASE "{DATABASE}"', auth="admin:pw")
        cluster = cluster_name()
        batch = frames(cluster, minute_ago(5), 3, nodes=1, gpus=2)
        store = open_store(StoreConfig(kind="influx", url=f"http://admin:pw@{server.address}",
                                       bucket=DATABASE))
        try:
            store.write(batch)
            assert {p[0].device for p in store.latest("gpu_temp_c", minute_ago(6))
                    if p[0].cluster == cluster} == {"gpu0", "gpu1"}
        finally:
            store.close()
        assert stored_points(server.address, cluster, auth="admin:pw") == sent_points(batch)
    finally:
        server.stop()


def test_a_token_that_conflicts_with_the_url_credentials_stops_start_up() -> None:
    url = f"http://admin:{PASSWORD}@127.0.0.1:{free_port()}"
    for kind in ("victoriametrics", "influx"):
        with pytest.raises(ConfigError) as raised:
            open_store(StoreConfig(kind=kind, url=url, token=Secret("another-token")))
        message = str(raised.value)
        assert "store.token" in message and "http://admin:***@127.0.0.1" in message
        assert PASSWORD not in message
    # The same credential twice is no conflict.
    open_store(StoreConfig(kind="influx", url=url, token=Secret(f"admin:{PASSWORD}"))).close()


def test_fleetwatch_process_refuses_the_conflict_at_start_with_exit_2(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env = {**clean, "FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": "127.0.0.1:9",
           "FLEETWATCH_STORE_KIND": "victoriametrics",
           "FLEETWATCH_STORE_URL": f"http://admin:{PASSWORD}@127.0.0.1:9",
           "FLEETWATCH_STORE_TOKEN": "another-token"}
    done = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "process"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("fleetwatch: configuration error: store.url = "
                                  "'http://admin:***@127.0.0.1:9' carries a user and password")
    assert PASSWORD not in done.stderr + done.stdout
