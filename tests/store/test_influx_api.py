"""``store.kind = "influx"`` against InfluxDB 1.x: which API a user's config writes through.

A config names only the server's URL; the store asks ``/ping`` which InfluxDB answers
there (``X-Influxdb-Version``) and writes through 1.x's ``/write`` or the v2 API, unless
``store.influx_api`` says which. What counts is what the server says it stored.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from fleetwatch.config import Config, load
from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.lpwriter import api_of_version
from fleetwatch.wiring import open_store
from tests.servers import Server, free_port
from tests.store.conftest import DATABASE, influxdb_v1
from tests.store.helpers import cluster_name, frames, minute_ago


def user_config(tmp: Path, url: str, **store: str) -> Config:
    """A user's fleetwatch.toml with a [store] section, read the way every command reads it."""
    path = tmp / "fleetwatch.toml"
    lines = ['kind = "influx"', f'url = "{url}"', *(f'{k} = "{v}"' for k, v in store.items())]
    path.write_text("[store]\n" + "\n".join(lines) + "\n", "utf-8")
    return load(path, env={})


def influxql(address: str, q: str, database: str = DATABASE, auth: str = "") -> dict:
    """One InfluxQL statement, asked of the server directly (not through the store)."""
    params = urllib.parse.urlencode({"db": database, "q": q})
    request = urllib.request.Request(f"http://{address}/query?{params}", method="POST")
    if auth:
        user, _, password = auth.partition(":")
        params = urllib.parse.urlencode({"db": database, "q": q, "u": user, "p": password})
        request = urllib.request.Request(f"http://{address}/query?{params}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        body = json.loads(r.read())
    assert "error" not in body["results"][0], body
    return body["results"][0]


def stored_points(address: str, cluster: str, auth: str = "", database: str = DATABASE) -> int:
    """Every field value the server holds for ``cluster``: SELECT count(*) per measurement."""
    total = 0
    for measurement in ("gpu", "host", "nic"):
        result = influxql(address, f'SELECT count(*) FROM "{measurement}" '
                                   f"WHERE \"cluster\" = '{cluster}'", database, auth)
        for series in result.get("series", []):
            total += sum(v for v in series["values"][0][1:] if v is not None)
    return total


def sent_points(batch: list[Frame]) -> int:
    return sum(len(g.metrics) for f in batch for g in f.gpus) + sum(
        len(f.host.metrics) + sum(len(p.metrics) for p in f.host.ports) for f in batch)


def test_a_config_naming_only_the_url_writes_to_influxdb_1x(influxdb: Server,
                                                            tmp_path: Path) -> None:
    config = user_config(tmp_path, f"http://{influxdb.address}", bucket=DATABASE)
    assert config.store.influx_api == "auto"
    cluster = cluster_name()
    batch = frames(cluster, minute_ago(10), 30, nodes=3, gpus=4)
    store = open_store(config.store)
    try:
        store.write(batch)
        store.write(batch)  # again, as a processor does after a rebalance: kept once
    finally:
        store.close()
    assert stored_points(influxdb.address, cluster) == sent_points(batch) == 30 * 3 * (4 * 2 + 2)


def test_the_same_config_reads_back_what_it_wrote(influxdb: Server, tmp_path: Path) -> None:
    config = user_config(tmp_path, f"http://{influxdb.address}", bucket=DATABASE)
    cluster, t0 = cluster_name(), minute_ago(10)
    store = open_store(config.store)
    try:
        store.write(frames(cluster, t0, 5, nodes=1, gpus=2))
        latest = [p for p in store.latest("gpu_temp_c", t0) if p[0].cluster == cluster]
    finally:
        store.close()
    assert sorted(p[0].device for p in latest) == ["gpu0", "gpu1"]
    assert {p[1] for p in latest} == {t0 + 4000}


def test_the_v2_api_against_1x_fails_at_once_saying_which_api_and_what_to_set(
        influxdb: Server, tmp_path: Path) -> None:
    config = user_config(tmp_path, f"http://{influxdb.address}", bucket=DATABASE,
                         influx_api="v2")
    cluster = cluster_name()
    store = open_store(config.store)
    try:
        with pytest.raises(StoreError) as failed:
            store.write(frames(cluster, minute_ago(5), 1, nodes=1))
    finally:
        store.close()
    message = str(failed.value)
    assert "HTTP 404: 404 page not found);" in message  # the server's reason, one line
    assert "/api/v2/write" in message and 'store.influx_api = "v2"' in message
    assert "1.6.7" in message  # what the server said it is
    assert 'set store.influx_api = "v1"' in message
    assert stored_points(influxdb.address, cluster) == 0


def test_a_missing_database_says_the_v1_api_was_used_and_what_to_create(
        influxdb: Server, tmp_path: Path) -> None:
    config = user_config(tmp_path, f"http://{influxdb.address}", bucket="no_such_db")
    store = open_store(config.store)
    try:
        with pytest.raises(StoreError) as failed:
            store.write(frames(cluster_name(), minute_ago(5), 1, nodes=1))
    finally:
        store.close()
    message = str(failed.value)
    assert "database not found" in message
    assert "InfluxDB 1.6.7" in message  # detected, and said so
    assert 'CREATE DATABASE "no_such_db"' in message and "store.bucket" in message


def test_a_store_opened_while_influxdb_is_down_finds_the_api_once_it_is_up(
        tmp_path: Path) -> None:
    server = influxdb_v1(tmp_path)
    store = InfluxQLStore(f"http://{server.address}", bucket=DATABASE)  # api="auto"
    cluster = cluster_name()
    batch = frames(cluster, minute_ago(5), 3, nodes=1, gpus=1)
    try:
        with pytest.raises(StoreError, match="/ping"):  # the processor pauses, then retries
            store.write(batch)
        server.start()
        influxql(server.address, f'CREATE DATABASE "{DATABASE}"')
        store.write(batch)
        assert stored_points(server.address, cluster) == sent_points(batch)
    finally:
        store.close()
        server.stop()


def test_a_1x_with_auth_takes_the_token_as_username_and_password(tmp_path: Path) -> None:
    server = influxdb_v1(tmp_path, auth=True).start()
    try:
        # The first user of a 1.x with auth on is created without credentials.
        influxql(server.address, "CREATE USER admin WITH PASSWORD 'pw' WITH ALL PRIVILEGES")
        influxql(server.address, f'CREATE DATABASE "{DATABASE}"', auth="admin:pw")
        cluster = cluster_name()
        batch = frames(cluster, minute_ago(5), 2, nodes=1, gpus=2)
        good = open_store(user_config(tmp_path, f"http://{server.address}", bucket=DATABASE,
                                      token="admin:pw").store)
        try:
            good.write(batch)
            assert {p[0].device for p in good.latest("gpu_temp_c", minute_ago(6))
                    if p[0].cluster == cluster} == {"gpu0", "gpu1"}
        finally:
            good.close()
        assert stored_points(server.address, cluster, auth="admin:pw") == sent_points(batch)

        bad = open_store(user_config(tmp_path, f"http://{server.address}", bucket=DATABASE,
                                     token="admin:wrong").store)
        try:
            with pytest.raises(StoreError, match="401.*'username:password'"):
                bad.write(frames(cluster_name(), minute_ago(5), 1, nodes=1))
        finally:
            bad.close()
    finally:
        server.stop()


@pytest.mark.parametrize(("version", "api"), [
    ("1.6.7~rc0", "v1"), ("1.8.10", "v1"), ("v1.11.8", "v1"),
    ("v2.7.11", "v2"), ("2.0.0", "v2"), ("3.0.1", "v2"),
    (None, "v2"), ("", "v2"), ("OSS", "v2"),  # VictoriaMetrics, InfluxDB Cloud: no version
])
def test_the_api_follows_the_major_version_ping_gives(version: str | None, api: str) -> None:
    assert api_of_version(version) == api


def test_an_unknown_api_setting_stops_start_up_naming_the_key(tmp_path: Path) -> None:
    from fleetwatch.config import ConfigError

    with pytest.raises(ConfigError, match="influx_api"):
        user_config(tmp_path, f"http://127.0.0.1:{free_port()}", influx_api="v3")


def test_a_v2_token_against_1x_is_refused_before_anything_is_sent(influxdb: Server,
                                                                   tmp_path: Path) -> None:
    config = user_config(tmp_path, f"http://{influxdb.address}", bucket=DATABASE,
                         token="a-v2-api-token")
    cluster = cluster_name()
    store = open_store(config.store)
    try:
        with pytest.raises(StoreError, match=r"1\.x.*'username:password'.*influx_api = \"v2\""):
            store.write(frames(cluster, minute_ago(5), 1, nodes=1))
    finally:
        store.close()
    assert stored_points(influxdb.address, cluster) == 0
