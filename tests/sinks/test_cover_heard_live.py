"""A cause covers another alert of its GPU only while it is heard, against a real
Alertmanager running the shipped deploy/alertmanager/alertmanager.yml: in a hot room
(room_inlet_hot firing, which mutes gpu_temp_critical there), a GPU that reached its slowdown
temperature and then reads far hotter than its peers is paged by its
gpu_hot_vs_peers_critical alert."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
import yaml

from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.store.base import Alert
from tests.servers import Server, alertmanager
from tests.sinks.conftest import Receiver
from tests.sinks.test_alertmanager_routing import CONFIG


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Receiver]]:
    """A real Alertmanager with the shipped routes and inhibit rules, every receiver pointed
    at one webhook receiver; group waits and intervals cut to 1 s."""
    hook = Receiver()
    tmp = tmp_path_factory.mktemp("am-heard")
    config = yaml.safe_load(CONFIG.read_text())
    for r in config["receivers"]:
        r["webhook_configs"] = [{"url": hook.url}]

    def fast(route: dict) -> None:
        for key in ("group_wait", "group_interval"):
            if key in route:
                route[key] = "1s"
        for sub in route.get("routes", []):
            fast(sub)
    config["route"]["group_wait"] = "1s"
    fast(config["route"])
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    server = alertmanager(tmp, config=path).start()
    yield server, hook
    server.stop()
    hook.close()


def gpu(rule: str, cluster: str, node: str, at: float, severity: str = "critical") -> Alert:
    return Alert(f"{rule}/{cluster}/{node}/gpu0/{at:.0f}", rule, severity, cluster, "r1", node,
                 "gpu0", "firing", at - 30, at, 1.0, f"{rule} on {node} gpu0", fired_ts=at,
                 evidence={"gpu_temp_c": 92.0})


def in_am(server: Server, cluster: str) -> dict[str, str]:
    url = f"http://{server.address}/api/v2/alerts?filter=" + urllib.parse.quote(
        f'cluster="{cluster}"')
    with urllib.request.urlopen(url, timeout=5) as r:
        return {a["labels"]["alertname"]: a["status"]["state"] for a in json.load(r)}


@pytest.mark.parametrize("warning_first", [False, True])
def test_in_a_hot_room_a_gpu_at_its_limit_then_hotter_than_its_peers_pages_in_alertmanager(
        shipped: tuple[Server, Receiver], warning_first: bool) -> None:
    server, hook = shipped
    cluster, node, t0 = f"room-{time.time_ns()}", "node-hot", time.time() - 900
    room = Alert(f"room_inlet_hot/{cluster}/*/{t0:.0f}", "room_inlet_hot", "critical", cluster,
                 "*", "", "rack:*", "firing", t0 - 300, t0, 33.0, "room inlet 33 °C",
                 fired_ts=t0)
    batches = [[room]]
    if warning_first:
        batches.append([gpu("gpu_hot_vs_peers", cluster, node, t0 + 30, "warning")])
    batches += [[gpu("gpu_temp_critical", cluster, node, t0 + 60)],
                [gpu("gpu_hot_vs_peers_critical", cluster, node, t0 + 300)]]
    notifier = Notifier([AlertmanagerSink(f"http://{server.address}", resend_s=60.0)],
                        background=False)
    for batch in batches:
        notifier.send(batch)
    notifier.close()
    want = {"room_inlet_hot": "active", "gpu_temp_critical": "suppressed",
            "gpu_hot_vs_peers_critical": "active"}
    if warning_first:  # muted by its family's critical, which is heard
        want["gpu_hot_vs_peers"] = "suppressed"
    deadline = time.monotonic() + 10
    while in_am(server, cluster) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    assert in_am(server, cluster) == want
    # and the pager hears of the GPU, not only of the room

    def paged() -> set[str]:
        return {a["labels"]["alertname"] for b in hook.bodies  # type: ignore[union-attr]
                if b["receiver"] == "gpu-ops-pager"  # type: ignore[index]
                and b["commonLabels"].get("cluster") == cluster  # type: ignore[index]
                for a in b["alerts"]}  # type: ignore[index]
    deadline = time.monotonic() + 15
    while "gpu_hot_vs_peers_critical" not in paged() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "gpu_hot_vs_peers_critical" in paged()
