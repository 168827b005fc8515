"""A cause covers another alert of its GPU only while it is heard, against a real
Alertmanager running the shipped deploy/alertmanager/alertmanager.yml: in a hot room
(room_inlet_hot firing, which mutes gpu_temp_critical there), a GPU that reached its slowdown
temperature (or warming at steady power) and then reads far hotter than its peers is paged by
its gpu_hot_vs_peers_critical alert. And a failed cooler, found by its die warming at steady
power and then by its peers and its limit, is one page there, whichever finding came first."""

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


def paged_in(hook: Receiver, cluster: str) -> set[str]:
    """The alert names the GPU pager was sent for ``cluster``."""
    return {a["labels"]["alertname"] for b in hook.bodies  # type: ignore[union-attr]
            if b["receiver"] == "gpu-ops-pager"  # type: ignore[index]
            and b["commonLabels"].get("cluster") == cluster  # type: ignore[index]
            for a in b["alerts"]}  # type: ignore[index]


WARM = "gpu_warming_at_steady_power"


@pytest.mark.parametrize("order", [
    (WARM, "gpu_hot_vs_peers_critical", "gpu_temp_critical"),
    ("gpu_temp_critical", WARM), ("gpu_hot_vs_peers_critical", WARM)],
    ids=["warming-first", "limit-first", "peers-first"])
def test_a_failed_cooler_pages_once_in_alertmanager(
        shipped: tuple[Server, Receiver], order: tuple[str, ...]) -> None:
    """A cooler failing under load: its die warming at steady power, then far above its
    peers and at its limit (or those first): fleetwatch posts the first only, so the pager
    hears of the GPU once (before, the warming alert and the later one both paged)."""
    server, hook = shipped
    cluster, node, t0 = f"cooler-{time.time_ns()}", "node-fan", time.time() - 900
    notifier = Notifier([AlertmanagerSink(f"http://{server.address}", resend_s=60.0)],
                        background=False)
    for k, rule in enumerate(order):
        notifier.send([gpu(rule, cluster, node, t0 + 60 * k)])
    notifier.close()
    deadline = time.monotonic() + 15
    while order[0] not in paged_in(hook, cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # past group_wait and group_interval (1 s): a second page would be here
    assert in_am(server, cluster) == {order[0]: "active"}
    assert paged_in(hook, cluster) == {order[0]}


@pytest.mark.parametrize("warning_first", [False, True])
@pytest.mark.parametrize("limit", ["gpu_temp_critical", WARM])
def test_in_a_hot_room_a_gpu_at_its_limit_then_hotter_than_its_peers_pages_in_alertmanager(
        shipped: tuple[Server, Receiver], warning_first: bool, limit: str) -> None:
    """``limit``: the GPU's first critical, which the room mutes in Alertmanager (at its
    slowdown temperature, or warming at steady power)."""
    server, hook = shipped
    cluster, node, t0 = f"room-{time.time_ns()}", "node-hot", time.time() - 900
    room = Alert(f"room_inlet_hot/{cluster}/*/{t0:.0f}", "room_inlet_hot", "critical", cluster,
                 "*", "", "rack:*", "firing", t0 - 300, t0, 33.0, "room inlet 33 °C",
                 fired_ts=t0)
    batches = [[room]]
    if warning_first:
        batches.append([gpu("gpu_hot_vs_peers", cluster, node, t0 + 30, "warning")])
    batches += [[gpu(limit, cluster, node, t0 + 60)],
                [gpu("gpu_hot_vs_peers_critical", cluster, node, t0 + 300)]]
    notifier = Notifier([AlertmanagerSink(f"http://{server.address}", resend_s=60.0)],
                        background=False)
    for batch in batches:
        notifier.send(batch)
    notifier.close()
    want = {"room_inlet_hot": "active", limit: "suppressed",
            "gpu_hot_vs_peers_critical": "active"}
    if warning_first:  # muted by its family's critical, which is heard
        want["gpu_hot_vs_peers"] = "suppressed"
    deadline = time.monotonic() + 10
    while in_am(server, cluster) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    assert in_am(server, cluster) == want
    # and the pager hears of the GPU, not only of the room
    deadline = time.monotonic() + 15
    while ("gpu_hot_vs_peers_critical" not in paged_in(hook, cluster)
           and time.monotonic() < deadline):
        time.sleep(0.2)
    assert "gpu_hot_vs_peers_critical" in paged_in(hook, cluster)
