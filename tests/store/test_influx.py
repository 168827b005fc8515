"""What only the InfluxDB path has to show: a refusal that will not get better is not retried."""

from __future__ import annotations

import time

import pytest

from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from tests.servers import Server
from tests.store.helpers import cluster_name, frames, minute_ago


def test_a_missing_database_fails_at_once_with_the_servers_reason(influxdb: Server) -> None:
    store = InfluxQLStore(f"http://{influxdb.address}", bucket="no_such_db", api="v1")
    started = time.monotonic()
    with pytest.raises(StoreError, match="database not found"):
        store.write(frames(cluster_name(), minute_ago(5), 2))
    assert time.monotonic() - started < 1
    with pytest.raises(StoreError, match="database not found"):
        store.latest("gpu_temp_c", 0)
    store.close()
