"""``fleetwatch_processor_info``: what differs between members, and only that.

Two InfluxDB databases on one server are two stores (a host whose environment file lacks
FLEETWATCH_STORE_BUCKET writes elsewhere); the order ``detectors.enabled`` is written in
changes nothing.
"""

from __future__ import annotations

from fleetwatch.config import load
from fleetwatch.wiring import processor_info


def info(**env: str) -> dict[str, str]:
    return processor_info(load(env={f"FLEETWATCH_{k.upper()}": v for k, v in env.items()}))


def test_influx_members_on_other_databases_of_one_server_differ() -> None:
    a = info(store_kind="influx", store_url="http://u:pw@db:8086", store_bucket="fleet_prod")
    b = info(store_kind="influx", store_url="http://u:pw@db:8086")
    assert a["store_target"] == "http://u:***@db:8086 org=fleetwatch bucket=fleet_prod"
    assert b["store_target"] == "http://u:***@db:8086 org=fleetwatch bucket=fleetwatch"
    v1 = info(store_kind="influx", store_url="http://db:8086", store_influx_api="v1",
              store_bucket="fleet_prod")
    assert v1["store_target"] == "http://db:8086 database=fleet_prod"
    assert info(store_kind="influx", store_org="other")["store_target"] != b["store_target"]


def test_victoriametrics_is_its_url() -> None:
    assert info(store_kind="victoriametrics",
                store_url="http://vm:8428/")["store_target"] == "http://vm:8428"


def test_the_detectors_hash_ignores_the_order_of_enabled() -> None:
    a = info(detectors_enabled="thermal_limits,throttle")
    b = info(detectors_enabled="throttle,thermal_limits")
    c = info(detectors_enabled="throttle")
    assert a["detectors"] == b["detectors"] != c["detectors"]
