from __future__ import annotations

import shutil
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.pipeline.store.base import Store
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.servers import Server, free_port
from tests.store.backends import Backend
from tests.store.helpers import force_flush, minute_ago

DATABASE = "fleetwatch"


def influxdb_v1(tmp: Path, auth: bool = False, max_series: int = 0) -> Server:
    """InfluxDB 1.x (Debian's 1.6.7 here): v1 API only, every listener on 127.0.0.1.
    ``auth``: users and passwords required (create the first admin without credentials);
    ``max_series``: ``max-series-per-database`` (0: the server's default, 1,000,000)."""
    binary = shutil.which("influxd")
    if binary is None:
        raise RuntimeError("no InfluxDB: `apt-get install influxdb` (scripts/test does this)")
    http, rpc = free_port(), free_port()
    config = tmp / "influxdb.conf"
    config.write_text(f"""reporting-enabled = false
bind-address = "127.0.0.1:{rpc}"
[meta]
  dir = "{tmp}/meta"
[data]
  dir = "{tmp}/data"
  wal-dir = "{tmp}/wal"
  query-log-enabled = false
{f"  max-series-per-database = {max_series}" if max_series else ""}
[monitor]
  store-enabled = false
[http]
  bind-address = "127.0.0.1:{http}"
  auth-enabled = {"true" if auth else "false"}
  log-enabled = false
[ifql]
  enabled = false
[logging]
  level = "warn"
""")
    return Server("influxd", [binary, "-config", str(config)], http,
                  log_path=tmp / "influxd.log")


@pytest.fixture(scope="session")
def influxdb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An InfluxDB 1.x on 127.0.0.1 with the database ``fleetwatch``, shared by the session."""
    server = influxdb_v1(tmp_path_factory.mktemp("influxdb")).start()
    query = urllib.parse.urlencode({"q": f'CREATE DATABASE "{DATABASE}"'})
    request = urllib.request.Request(f"http://{server.address}/query?{query}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        r.read()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "victoriametrics", "influxdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each store backend in turn (``tests/store/backends.py``): SQLite, VictoriaMetrics and
    InfluxDB 1.x (the InfluxQL reads of ``store.kind = "influx"``, written through v1)."""
    if request.param == "sqlite":
        store: Store = SqliteStore(tmp_path / "store.db")
        b = Backend(store, lambda: store.maintain(minute_ago(0)))
    elif request.param == "victoriametrics":
        server: Server = request.getfixturevalue("victoria")
        store = VictoriaMetricsStore(f"http://{server.address}")
        b = Backend(store, lambda: force_flush(server.address), keeps_text=False,
                    victoria=server)
    else:
        influx: Server = request.getfixturevalue("influxdb")
        store = InfluxQLStore(f"http://{influx.address}", bucket=DATABASE, api="v1")
        b = Backend(store, lambda: None, v1=True)
    yield b
    b.store.close()
