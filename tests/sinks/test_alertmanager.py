"""The Alertmanager sink against a real Alertmanager (Debian's), read back from its API."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

from fleetwatch.codec import encode
from fleetwatch.frame import Frame
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.store.base import Silence
from tests.servers import Server
from tests.sinks.conftest import frame, tmp_store


def am_alerts(am: Server, node: str) -> list[dict]:
    url = f"http://{am.address}/api/v2/alerts?filter=" + urllib.parse.quote(f'node="{node}"')
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def wait_for(check, timeout_s: float = 10.0):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_a_firing_alert_reaches_alertmanager_and_its_resolution_ends_it(
        am: Server, tmp_path: Path) -> None:
    node = f"node-am-{time.time_ns()}"
    sink = AlertmanagerSink(f"http://{am.address}", resend_s=60,
                            dashboard_url="http://127.0.0.1:8050")
    notifier = Notifier([sink], background=False)
    processor = Processor(tmp_store(tmp_path), [GpuTemperatureLimit(85, for_s=30)],
                          notify=notifier.send)
    now = time.time() - 120
    for i, t in enumerate([70, 90, 91, 92]):
        processor.process([frame(now + 15 * i, [60, t], node=node)])
    (got,) = wait_for(lambda: am_alerts(am, node))
    assert got["labels"] == {"alertname": "gpu_temp_high", "severity": "critical",
                             "cluster": "c", "rack": "r1", "node": node, "device": "gpu1",
                             "scope": "gpu"}
    assert got["status"]["state"] == "active"
    assert "92" in got["annotations"]["summary"] and node in got["annotations"]["description"]
    assert got["generatorURL"] == f"http://127.0.0.1:8050/node/{node}?cluster=c&gpu=1"
    starts = datetime.fromisoformat(got["startsAt"].replace("Z", "+00:00")).timestamp()
    assert abs(starts - (now + 45)) < 0.01   # when it fired, in the frames' time
    processor.process([frame(now + 60, [60, 60], node=node)])
    assert wait_for(lambda: not am_alerts(am, node))  # resolved: no longer active there
    # pending, firing, resolved: three batches handed over, none failed
    assert notifier.stats.failed == 0 and notifier.stats.delivered == 3


def test_firing_alerts_are_re_sent_before_alertmanager_expires_them(am: Server) -> None:
    node = f"node-resend-{time.time_ns()}"
    sink = AlertmanagerSink(f"http://{am.address}", resend_s=1.0)
    notifier = Notifier([sink], background=True, tick_s=0.2)
    book_alert = _firing(node)
    notifier.send([book_alert])
    (first,) = wait_for(lambda: am_alerts(am, node))
    # The notifier's thread re-posts it once a resend interval has passed (30 s: a bound
    # for a loaded machine, not the interval's timing).
    assert wait_for(lambda: any(a["endsAt"] > first["endsAt"] for a in am_alerts(am, node)),
                    30)
    # Without re-sending it would expire 4 resends after the last post.
    time.sleep(0.5)
    notifier.close()
    assert notifier.stats.failed == 0


def test_a_silenced_alert_is_not_sent(am: Server, tmp_path: Path) -> None:
    node = f"node-silenced-{time.time_ns()}"
    store = tmp_store(tmp_path)
    store.write_silences([Silence("maint", (("node", "=", node),), 0, 4e9, "ops", "swap")])
    notifier = Notifier([AlertmanagerSink(f"http://{am.address}")], silences=store.silences,
                        background=False)
    (notice,) = notifier.send([_firing(node)])
    assert notice.muted_by == "silence:maint"
    time.sleep(1.0)
    assert am_alerts(am, node) == []


def _firing(node: str):  # noqa: ANN202
    from fleetwatch.pipeline.store.base import Alert

    now = time.time()
    return Alert(f"gpu_temp_high/c/{node}/gpu0/1", "gpu_temp_high", "critical", "c", "r1", node,
                 "gpu0", "firing", now - 60, now, 91.0, "GPU 0 at 91 °C", fired_ts=now - 30,
                 evidence={"gpu_temp_c": 91.0}, action="check the GPU's cooling")


def _message(f: Frame) -> Message:
    return Message(encode(f), f.node.encode(), "frames", 0)


def test_alerts_open_at_a_restart_keep_being_re_sent_without_a_new_notification(
        am: Server, tmp_path: Path) -> None:
    """Loaded with their node's partition: re-sent as still firing, not notified as new."""
    node = f"node-restart-{time.time_ns()}"
    store = tmp_store(tmp_path)
    store.write_alerts([_firing(node)])                 # left open by the previous process
    from fleetwatch.config import load
    from fleetwatch.wiring import open_notifier

    config = load(None, env={"FLEETWATCH_ALERTS_ALERTMANAGER_URL": f"http://{am.address}"})
    notifier = open_notifier(config, store)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notifier=notifier)
    try:
        time.sleep(1.5)
        assert am_alerts(am, node) == []  # not this member's before its partition is
        processor.ownership.assigned([("frames", 0)])
        processor.handle([_message(frame(time.time(), [91], node=node))])
        (got,) = wait_for(lambda: am_alerts(am, node))  # re-sent by the notifier's thread
        assert got["labels"]["node"] == node
        assert notifier.send([_firing(node)]) == []       # same state: not notified again
        assert notifier.stats.sinks["alertmanager"].sent == 0  # no change was notified
    finally:
        notifier.close()


def test_alerts_of_a_partition_that_moved_away_are_no_longer_re_sent(
        am: Server, tmp_path: Path) -> None:
    """Else an alert the new owner resolves would come back to life from here."""
    node, other = f"node-moved-{time.time_ns()}", f"node-stays-{time.time_ns()}"
    store = tmp_store(tmp_path)
    store.write_alerts([_firing(node)])
    # Re-sent every 2 s, valid for 8 s: still there, unchanged, if not re-sent for 4 s.
    sink = AlertmanagerSink(f"http://{am.address}", resend_s=2.0)
    notifier = Notifier([sink], tick_s=0.1)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notifier=notifier)
    try:
        processor.ownership.assigned([("frames", 0), ("frames", 1)])
        now = time.time()
        processor.handle([_message(frame(now, [91], node=node)),
                          Message(encode(frame(now, [95], node=other)), other.encode(),
                                  "frames", 1)])
        assert wait_for(lambda: am_alerts(am, node) and am_alerts(am, other))
        processor.ownership.revoked([("frames", 0), ("frames", 1)])  # a rebalance: 0 moves
        processor.ownership.assigned([("frames", 1)])
        # The sink's lane let go of the node's alert: a re-send it had on its way (ticks
        # and the hand-over run on that one thread) has landed.
        assert wait_for(lambda: all(a.node != node for a in list(sink._firing.values())), 30)
        (before,) = am_alerts(am, node)
        (kept,) = am_alerts(am, other)
        time.sleep(4.0)                    # two resend intervals
        (after,) = am_alerts(am, node)
        assert after["endsAt"] == before["endsAt"], "re-sent after its partition moved"
        # the alerts of a partition kept still are
        assert wait_for(lambda: any(a["endsAt"] > kept["endsAt"] for a in am_alerts(am, other)),
                        30)
    finally:
        notifier.close()


def test_an_acknowledged_alert_stays_active_in_alertmanager(am: Server) -> None:
    from fleetwatch.pipeline.store.base import Acknowledgement

    node = f"node-acked-{time.time_ns()}"
    alert = _firing(node)
    acks: list[Acknowledgement] = []
    notifier = Notifier([AlertmanagerSink(f"http://{am.address}", resend_s=1.0)],
                        acks=lambda: acks, reload_s=0, tick_s=0.2)
    try:
        notifier.send([alert])
        (first,) = wait_for(lambda: am_alerts(am, node))
        acks.append(Acknowledgement(alert.id, time.time(), "oncall"))
        (notice,) = notifier.send([alert])       # a refresh after the ack: muted, not new
        assert notice.muted_by == "ack:oncall"
        # still re-sent, so not expired there
        assert wait_for(lambda: any(a["endsAt"] > first["endsAt"] for a in am_alerts(am, node)),
                        30)
    finally:
        notifier.close()


def test_alertmanager_gets_the_board_as_annotations_and_groups_by_the_slot(
        am: Server, tmp_path: Path) -> None:
    """An RMA needs the board's serial, UUID and PCI bus id: annotations, so that the
    labels Alertmanager groups and silences by stay the slot's."""
    from dataclasses import replace

    node = f"node-am-board-{time.time_ns()}"
    notifier = Notifier([AlertmanagerSink(f"http://{am.address}", resend_s=60)],
                        background=False)
    processor = Processor(tmp_store(tmp_path), [GpuTemperatureLimit(85, for_s=0)],
                          notify=notifier.send)
    info = {"serial": "1650123456789", "pci_bus_id": "00000000:31:00.0"}
    f = frame(time.time() - 60, [60, 95], node=node)
    board = replace(f.gpus[1], uuid="GPU-1f2e3d4c-0000-1111-2222-333344445555", info=info)
    processor.process([replace(f, gpus=(f.gpus[0], board))])
    (got,) = wait_for(lambda: am_alerts(am, node))
    assert "uuid" not in got["labels"] and got["labels"]["device"] == "gpu1"
    ann = got["annotations"]
    assert (ann["serial"], ann["uuid"], ann["pci_bus_id"]) == (
        "1650123456789", "GPU-1f2e3d4c-0000-1111-2222-333344445555", "00000000:31:00.0")
    assert "board: serial=1650123456789" in ann["description"]
