"""deploy/alertmanager/alertmanager.yml in a real Alertmanager notifying a webhook: a storm of
alerts with one cause (a switch silencing 100 nodes, a row's power brake slowing every GPU
of 100 more, cooling failing under 50 racks) reaches the pager as one notification per
cluster and rule, listing every node or rack; a single node's fault still notifies on its
own within group_wait."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.store.base import Alert
from tests.servers import Server, alertmanager
from tests.sinks.conftest import Receiver
from tests.sinks.test_alertmanager_routing import CONFIG

GROUP_WAIT_S = 10.0  # the critical routes' group_wait in the shipped configuration


def alert(rule: str, cluster: str, node: int, device: str = "host") -> Alert:
    """A critical alert of node ``node`` (racks of 10 nodes); device "rack": of rack ``node``."""
    now = time.time()
    name = f"node-{node:03d}" if device != "rack" else ""
    rack = f"rack-{node // 10 if name else node:02d}"
    return Alert(f"{rule}/{cluster}/{name or rack}/{device}/1", rule, "critical", cluster,
                 rack, name, device, "firing", now - 60, now, 65.0,
                 f"{rule} on {name}", fired_ts=now - 5)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Receiver]]:
    """A real Alertmanager with the shipped routes, every receiver pointed at one webhook
    receiver (the receiver's name is in each notification)."""
    hook = Receiver()
    tmp = tmp_path_factory.mktemp("am-storm")
    config = yaml.safe_load(CONFIG.read_text())
    for r in config["receivers"]:
        r["webhook_configs"] = [{"url": hook.url}]
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    server = alertmanager(tmp, config=path).start()
    yield server, hook
    server.stop()
    hook.close()


def pages(hook: Receiver, cluster: str) -> list[dict]:
    return [b for b in hook.bodies  # type: ignore[misc]
            if b["receiver"] == "gpu-ops-pager"
            and b["commonLabels"].get("cluster") == cluster]


def test_a_storm_on_200_nodes_and_50_racks_is_three_pages_listing_them(
        shipped: tuple[Server, Receiver]) -> None:
    server, hook = shipped
    cluster = f"storm-{time.time_ns()}"
    silent = [alert("node_silent", cluster, n) for n in range(100)]          # a switch
    braked = [alert("gpu_hw_slowdown", cluster, n, f"gpu{g}")                # a row's power
              for n in range(100, 200) for g in range(8)]
    hot = [alert("rack_cooling", cluster, r, "rack") for r in range(50, 100)]  # a CDU
    AlertmanagerSink(f"http://{server.address}").send(
        [Notice(a, "") for a in silent + braked + hot])
    deadline = time.monotonic() + GROUP_WAIT_S + 8
    while len(pages(hook, cluster)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # anything more would come now: one group per node all flush together
    assert len(pages(hook, cluster)) == 3, f"{len(pages(hook, cluster))} pages"
    got = {b["groupLabels"]["alertname"]: b for b in pages(hook, cluster)}
    assert {a["labels"]["node"] for a in got["node_silent"]["alerts"]} == {
        a.node for a in silent}
    assert len(got["gpu_hw_slowdown"]["alerts"]) == 800
    assert len({a["labels"]["node"] for a in got["gpu_hw_slowdown"]["alerts"]}) == 100
    assert {a["labels"]["rack"] for a in got["rack_cooling"]["alerts"]} == {a.rack for a in hot}


def test_one_silent_node_alone_pages_within_group_wait(
        shipped: tuple[Server, Receiver]) -> None:
    server, hook = shipped
    cluster = f"single-{time.time_ns()}"
    start = time.monotonic()
    AlertmanagerSink(f"http://{server.address}").send(
        [Notice(alert("node_silent", cluster, 7), "")])
    while not pages(hook, cluster) and time.monotonic() - start < GROUP_WAIT_S + 5:
        time.sleep(0.1)
    took = time.monotonic() - start
    [page] = pages(hook, cluster)
    assert [a["labels"]["node"] for a in page["alerts"]] == ["node-007"]
    assert took <= GROUP_WAIT_S + 3, took
