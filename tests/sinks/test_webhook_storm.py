"""The webhook's summary: a storm with one cause (a switch silencing 100 nodes, a row's power
brake on 800 GPUs of 100 more) is a line per cluster and rule in the POST, listing the nodes
and racks it covers, beside the per-node groups a receiver had before."""

from __future__ import annotations

import time

from fleetwatch.alert_view import rule_summary
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.webhook import WebhookSink, summary
from fleetwatch.pipeline.store.base import Alert
from tests.sinks.conftest import Receiver


def alert(rule: str, node: int, device: str = "host", state: str = "firing",
          cluster: str = "c1") -> Alert:
    now = time.time()
    name = f"node-{node:03d}" if node >= 0 else ""
    return Alert(f"{rule}/{cluster}/{name}/{device}/1", rule, "critical", cluster,
                 f"rack-{abs(node) // 10:02d}", name, device, state, now - 60, now, 1.0,
                 f"{rule} on {name}", fired_ts=now - 5,
                 resolved_ts=now if state == "resolved" else None)


def storm() -> list[Alert]:
    return ([alert("node_silent", n) for n in range(100)]
            + [alert("gpu_hw_slowdown", n, f"gpu{g}") for n in range(100, 200)
               for g in range(8)])


def test_a_storm_is_a_line_per_cluster_rule_and_state() -> None:
    lines = summary([*storm(), alert("node_silent", 300, state="resolved"),
                     alert("rack_cooling", -70, "rack"), alert("node_silent", 5, cluster="c2")])
    assert [(x["cluster"], x["rule"], x["state"], x["alerts"], len(x["nodes"]),
             len(x["racks"])) for x in lines] == [
        ("c1", "gpu_hw_slowdown", "firing", 800, 100, 10),
        ("c1", "node_silent", "firing", 100, 100, 10),
        ("c1", "node_silent", "resolved", 1, 1, 1),
        ("c1", "rack_cooling", "firing", 1, 0, 1),
        ("c2", "node_silent", "firing", 1, 1, 1)]
    assert lines[0]["text"] == (
        "gpu_hw_slowdown (critical) firing: 800 alerts on 100 nodes in 10 racks of c1")
    assert lines[1]["nodes"][:2] == ["node-000", "node-001"]
    assert lines[3]["text"] == "rack_cooling (critical) firing: 1 alert on 1 rack of c1"
    assert lines[3]["racks"] == ["rack-07"]


def test_the_webhook_posts_a_storm_once_with_its_summary(receiver: Receiver) -> None:
    WebhookSink(receiver.url).send([Notice(a, "") for a in storm()]
                                   + [Notice(alert("node_silent", 250), "node-250 silenced")])
    [body] = receiver.bodies
    assert [x["text"] for x in body["summary"]] == [  # type: ignore[index]
        "gpu_hw_slowdown (critical) firing: 800 alerts on 100 nodes in 10 racks of c1",
        "node_silent (critical) firing: 100 alerts on 100 nodes in 10 racks of c1"]
    # The per-node groups are still there, for receivers that read them.
    assert len(body["groups"]) == 200  # type: ignore[index]
    assert sum(len(g["alerts"]) for g in body["groups"]) == 900  # type: ignore[index]


def test_the_room_alert_is_the_room_not_one_rack() -> None:
    now = time.time()
    room = Alert("room_inlet_hot/sim//rack:*/1", "room_inlet_hot", "warning", "sim", "*", "",
                 "rack:*", "firing", now - 60, now, 29.0, "the room's air", fired_ts=now - 5)
    [line] = summary([room])
    assert line["text"] == "room_inlet_hot (warning) firing: 1 alert on the room of sim"
    assert line["racks"] == []
    assert rule_summary([room]) == ["1 room_inlet_hot (warning) firing on the room of sim"]
