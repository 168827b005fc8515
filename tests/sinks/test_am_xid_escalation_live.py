"""An XID alert's escalation against a real Alertmanager with a webhook receiver and a short
group_interval: what its receivers hear (notified, resolved, muted) through escalations,
acknowledgements, restarts, partition moves and upgrades; and the shipped routing and inhibit
rules with amtool. The payloads alone: test_am_xid_escalation.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink, am_labels
from fleetwatch.pipeline.sinks.base import iso
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Acknowledgement, Alert
from tests.servers import Server, alertmanager
from tests.sinks.conftest import Receiver, tmp_store
from tests.sinks.test_am_silences import fw_silences
from tests.sinks.test_am_xid_escalation import legacy, xid_alert
from tests.sinks.test_xid_alert_updates import xid_frame


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Receiver]]:
    """Alertmanager notifying a webhook receiver: one group per alert (alertname, node), a
    short group_interval, so a notification is a new alert or a resolution, never a repeat."""
    receiver = Receiver()
    tmp = tmp_path_factory.mktemp("am-hook")
    config = tmp / "alertmanager.yml"
    config.write_text(f"""route:
  receiver: hook
  group_by: [alertname, cluster, node]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {receiver.url}
""")
    server = alertmanager(tmp, config=config).start()
    yield server, receiver
    server.stop()
    receiver.close()


def notified(receiver: Receiver, node: str, rule: str = "gpu_xid_critical") -> list[dict]:
    return [b for b in receiver.bodies  # type: ignore[misc]
            if b["groupLabels"].get("node") == node and b["groupLabels"]["alertname"] == rule]


def active(am: Server, node: str) -> list[dict]:
    from tests.sinks.test_alertmanager import am_alerts

    return am_alerts(am, node)


def until(check, timeout_s: float = 15.0):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout_s
    while not (got := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def _processor(am: Server, tmp_path: Path, **kw: Any) -> tuple[Processor, Notifier]:
    notifier = Notifier([AlertmanagerSink(f"http://{am.address}", resend_s=60.0), *kw.pop(
        "more", [])], background=False, **kw)
    return Processor(tmp_store(tmp_path), [XidEvents()], notify=notifier.send), notifier


def test_alertmanager_notifies_48_then_64_twice_and_resolves_48s_label_set(
        hooked: tuple[Server, Receiver], tmp_path: Path) -> None:
    am, receiver = hooked
    node = f"node-esc-{time.time_ns()}"
    processor, notifier = _processor(am, tmp_path)
    now = time.time() - 60
    try:
        processor.process([xid_frame(now, (48,), node=node)])
        assert until(lambda: notified(receiver, node))
        processor.process([xid_frame(now + 12, (64,), node=node)])
        assert until(lambda: len(notified(receiver, node)) == 2)
        second = notified(receiver, node)[1]
        got = {(a["labels"]["remedy"], a["status"]) for a in second["alerts"]}
        assert got == {("rma", "firing"), ("drain", "resolved")}
        (live,) = active(am, node)                   # nothing of 48's label set lingers
        assert live["labels"]["remedy"] == "rma"
        time.sleep(4.5)                              # two group_intervals: nothing more
        assert len(notified(receiver, node)) == 2
    finally:
        notifier.close()


def test_48_then_48_again_and_the_same_rank_is_notified_once(
        hooked: tuple[Server, Receiver], tmp_path: Path) -> None:
    """13 is an information XID: its own alert (gpu_xid_info, remedy none), notified once in
    its own group; the critical alert's label set is unchanged by 48 again and 46."""
    am, receiver = hooked
    node = f"node-same-{time.time_ns()}"
    processor, notifier = _processor(am, tmp_path)
    now = time.time() - 400
    try:
        processor.process([xid_frame(now, (48,), node=node)])
        assert until(lambda: notified(receiver, node))
        for i, codes in enumerate(((48,), (13,), (46,), (48,)), 1):
            processor.process([xid_frame(now + 70 * i, codes, node=node)])
        assert until(lambda: notified(receiver, node, "gpu_xid_info"))
        time.sleep(4.5)
        assert len(notified(receiver, node)) == 1
        (info,) = notified(receiver, node, "gpu_xid_info")
        assert [a["labels"]["remedy"] for a in info["alerts"]] == ["none"]
        live = {a["labels"]["alertname"]: a for a in active(am, node)}
        assert live["gpu_xid_critical"]["labels"]["remedy"] == "drain"
        assert "46 (" in live["gpu_xid_critical"]["annotations"]["summary"]
    finally:
        notifier.close()


def test_an_acked_alert_that_escalates_stays_quiet_as_on_the_webhook(
        hooked: tuple[Server, Receiver], tmp_path: Path) -> None:
    """fleetwatch's ack holds until the alert resolves, whatever joins it: the webhook hears
    nothing of the 64, and neither do Alertmanager's receivers; the RMA label set is there,
    silenced by the ack's silence, and so is 48's, kept until the alert resolves (its
    "resolved" would be muted, and lost). When it resolves (``xid_hold_s`` later), the
    receiver that heard 48 hears its set resolved."""
    am, receiver = hooked
    hook = Receiver()
    node = f"node-ack-{time.time_ns()}"
    acks: list[Acknowledgement] = []
    processor, notifier = _processor(am, tmp_path, acks=lambda: acks, reload_s=0,
                                     more=[WebhookSink(hook.url)])
    now = time.time() - 3800
    try:
        processor.process([xid_frame(now, (48,), node=node)])
        assert until(lambda: notified(receiver, node))
        (alert,) = processor.store.alerts()
        acks.append(Acknowledgement(alert.id, time.time(), "oncall"))
        notifier.send([])                             # reloaded: the ack is mirrored
        assert until(lambda: fw_silences(am, node))
        processor.process([xid_frame(now + 12, (64,), node=node)])
        (live,) = until(lambda: [a for a in active(am, node)
                                 if a["labels"]["remedy"] == "rma"])
        assert live["status"]["state"] == "suppressed" and live["status"]["silencedBy"]
        assert sorted((a["labels"]["remedy"], a["status"]["state"])
                      for a in active(am, node)) == [("drain", "suppressed"),
                                                     ("rma", "suppressed")]
        time.sleep(4.5)
        assert len(notified(receiver, node)) == 1
        assert [a["evidence"]["xid"] for b in hook.bodies for g in b["groups"]  # type: ignore
                for a in g["alerts"]] == [48]
        (stored,) = processor.store.alerts()
        assert "RMA" in stored.action
        processor.process([xid_frame(now + 12 + 3601, node=node)])
        assert until(lambda: len(notified(receiver, node)) == 2)
        assert {(a["labels"]["remedy"], a["status"])
                for a in notified(receiver, node)[1]["alerts"]} >= {("drain", "resolved")}
        assert not active(am, node) and not fw_silences(am, node)
    finally:
        notifier.close()
        hook.close()


def _resolutions(receiver: Receiver, node: str) -> list[tuple[str, str]]:
    """(remedy, status) of every alert notified for the node after its first notification."""
    return [(a["labels"]["remedy"], a["status"]) for b in notified(receiver, node)[1:]
            for a in b["alerts"]]


def _notified_then_acked(am: Server, receiver: Receiver, node: str,
                         t0: float) -> AlertmanagerSink:
    """An XID 48 alert posted and heard, then acknowledged by the on-call."""
    sink = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    first = xid_alert(48, node=node, t0=t0)
    sink.mutes([], {})
    sink.send([Notice(first)])
    assert until(lambda: notified(receiver, node))
    sink.mutes([], {first.id: Acknowledgement(first.id, time.time(), "oncall")})
    return sink


def test_an_acked_alert_that_escalates_is_heard_resolved_under_the_set_notified(
        hooked: tuple[Server, Receiver]) -> None:
    """48 notified, acked, 64 joins (quiet), the alert resolves: the receiver that heard 48's
    set hears it resolved (not only the RMA set, which it never heard), and nothing fires."""
    am, receiver = hooked
    node = f"node-ackres-{time.time_ns()}"
    t0 = time.time() - 200
    sink = _notified_then_acked(am, receiver, node, t0)
    assert until(lambda: fw_silences(am, node))
    sink.send([Notice(xid_alert(48, 64, node=node, t0=t0), "ack:oncall")])
    time.sleep(4.5)
    assert len(notified(receiver, node)) == 1
    sink.send([Notice(xid_alert(48, 64, node=node, t0=t0, state="resolved"))])
    assert until(lambda: ("drain", "resolved") in _resolutions(receiver, node))
    time.sleep(4.5)
    assert _resolutions(receiver, node).count(("drain", "resolved")) == 1
    assert ("rma", "firing") not in _resolutions(receiver, node)
    assert not active(am, node) and not fw_silences(am, node)


def test_an_acked_alert_that_resolves_is_heard_resolved_once(
        hooked: tuple[Server, Receiver]) -> None:
    """Without an escalation: posted resolved twice (under the ack's silence, then after
    its expiry), heard once."""
    am, receiver = hooked
    node = f"node-ackplain-{time.time_ns()}"
    t0 = time.time() - 200
    sink = _notified_then_acked(am, receiver, node, t0)
    sink.send([Notice(xid_alert(48, node=node, t0=t0, state="resolved"))])
    assert until(lambda: _resolutions(receiver, node))
    time.sleep(4.5)
    assert _resolutions(receiver, node) == [("drain", "resolved")]
    assert not active(am, node)


def test_a_restart_whose_backlog_escalates_resolves_the_adopted_set_at_once(
        hooked: tuple[Server, Receiver]) -> None:
    """The processor stops after posting 48; 64 arrives while it is down; the restarted one
    adopts the alert (Alertmanager has 48's set, as the store) and reads 64 first: one
    notification, 48's set resolved and the RMA one firing, nothing left of 48's."""
    am, receiver = hooked
    node = f"node-restart-{time.time_ns()}"
    t0 = time.time() - 60
    AlertmanagerSink(f"http://{am.address}", resend_s=60.0).send(
        [Notice(xid_alert(48, node=node, t0=t0))])
    assert until(lambda: notified(receiver, node))
    restarted = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    restarted.adopt([Notice(xid_alert(48, node=node, t0=t0))])
    restarted.send([Notice(xid_alert(48, 64, node=node, t0=t0))])
    assert until(lambda: len(notified(receiver, node)) == 2)
    assert set(_resolutions(receiver, node)) == {("rma", "firing"), ("drain", "resolved")}
    assert [a["labels"]["remedy"] for a in active(am, node)] == ["rma"]
    time.sleep(4.5)
    assert len(notified(receiver, node)) == 2


def test_a_restart_after_an_acked_escalation_still_resolves_the_set_notified(
        hooked: tuple[Server, Receiver]) -> None:
    """As the acked escalation above, with a restart between the escalation and the end:
    the new processor finds both sets in Alertmanager and resolves both."""
    am, receiver = hooked
    node = f"node-ackrestart-{time.time_ns()}"
    t0 = time.time() - 200
    first = xid_alert(48, node=node, t0=t0)
    acks = {first.id: Acknowledgement(first.id, time.time(), "oncall")}
    owner = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    owner.mutes([], {})
    owner.send([Notice(first)])
    assert until(lambda: notified(receiver, node))
    owner.mutes([], acks)
    owner.send([Notice(xid_alert(48, 64, node=node, t0=t0), "ack:oncall")])
    restarted = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    restarted.mutes([], acks)
    restarted.adopt([Notice(xid_alert(48, 64, node=node, t0=t0), "ack:oncall")])
    restarted.tick()
    time.sleep(3)
    assert len(notified(receiver, node)) == 1
    restarted.send([Notice(xid_alert(48, 64, node=node, t0=t0, state="resolved"))])
    assert until(lambda: ("drain", "resolved") in _resolutions(receiver, node))
    time.sleep(3)
    assert ("rma", "firing") not in _resolutions(receiver, node)
    assert not active(am, node)


def _post_raw(am: Server, labels: dict[str, str], start: float) -> None:
    """Post an alert as an older release did (its labels, no remedy)."""
    import json
    import urllib.request

    body = [{"labels": labels, "annotations": {"summary": "XID 48"}, "startsAt": iso(start),
             "endsAt": iso(time.time() + 240)}]
    req = urllib.request.Request(f"http://{am.address}/api/v2/alerts",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=5).close()


def test_a_partition_move_re_pages_nobody_and_a_stored_escalation_is_heard(
        hooked: tuple[Server, Receiver]) -> None:
    """Another processor adopts the alert: the same label set, no notification. One that
    adopts an escalation its owner stored but never posted notifies it, 48's set resolved."""
    am, receiver = hooked
    node = f"node-move-{time.time_ns()}"
    t0 = time.time() - 60
    owner = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    owner.send([Notice(xid_alert(48, node=node, t0=t0))])
    assert until(lambda: notified(receiver, node))
    owner.forget([node])
    adopter = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    adopter.adopt([Notice(xid_alert(48, node=node, t0=t0))])
    adopter.tick()
    time.sleep(4.5)
    assert len(notified(receiver, node)) == 1
    (live,) = active(am, node)
    assert live["labels"] == am_labels(xid_alert(48, node=node, t0=t0))
    again = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    again.adopt([Notice(xid_alert(48, 64, node=node, t0=t0))])  # stored, never posted
    again.tick()
    assert until(lambda: len(notified(receiver, node)) == 2)
    got = {(a["labels"]["remedy"], a["status"]) for a in notified(receiver, node)[1]["alerts"]}
    assert got == {("rma", "firing"), ("drain", "resolved")}
    assert [a["labels"]["remedy"] for a in active(am, node)] == ["rma"]


def test_an_upgrade_keeps_an_older_releases_label_set_until_the_alert_escalates(
        hooked: tuple[Server, Receiver]) -> None:
    am, receiver = hooked
    node = f"node-upgrade-{time.time_ns()}"
    t0 = time.time() - 60
    _post_raw(am, legacy(xid_alert(48, node=node, t0=t0)), t0)
    assert until(lambda: notified(receiver, node))
    sink = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    sink.adopt([Notice(xid_alert(48, node=node, t0=t0))])
    sink.tick()
    time.sleep(4.5)
    assert len(notified(receiver, node)) == 1
    (live,) = active(am, node)
    assert "remedy" not in live["labels"] and live["annotations"]["summary"] != "XID 48"
    sink.send([Notice(xid_alert(48, 64, node=node, t0=t0))])
    assert until(lambda: len(notified(receiver, node)) == 2)
    got = {(a["labels"].get("remedy", ""), a["status"])
           for a in notified(receiver, node)[1]["alerts"]}
    assert got == {("rma", "firing"), ("", "resolved")}


def test_rmas_can_be_routed_to_the_hardware_team(tmp_path: Path) -> None:
    """The README's route, added to deploy/alertmanager/alertmanager.yml: an XID 64 goes to
    the hardware team and the pager, an XID 48 to the pager only."""
    import yaml

    from tests.sinks.test_alertmanager_routing import CONFIG, amtool

    config = yaml.safe_load(CONFIG.read_text())
    config["route"]["routes"].insert(0, {"matchers": ['remedy="rma"'],
                                         "receiver": "gpu-hardware", "continue": True})
    config["receivers"].append({"name": "gpu-hardware", "webhook_configs": [
        {"url": "http://127.0.0.1:9099/gpu-hardware"}]})
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    assert "SUCCESS" in amtool("check-config", str(path))

    def receivers(alert: Alert) -> str:
        return amtool("config", "routes", "test", f"--config.file={path}",
                      *(f"{k}={v}" for k, v in am_labels(alert).items()))

    assert receivers(xid_alert(48, 64)) == "gpu-hardware,gpu-ops-pager"
    assert receivers(xid_alert(48)) == "gpu-ops-pager"


def test_deploys_inhibit_rules_cover_an_xid_alert_whatever_its_remedy(tmp_path: Path) -> None:
    """A silent node's alert inhibits its GPUs' XID alerts, before and after 64 joins."""
    import shutil

    from tests.sinks.test_alertmanager_routing import CONFIG

    config = tmp_path / "alertmanager.yml"
    shutil.copy(CONFIG, config)
    server = alertmanager(tmp_path, config=config).start()
    try:
        node, t0 = f"node-inhibit-{time.time_ns()}", time.time() - 60
        silent = Alert(f"node_silent/c/{node}/host/1", "node_silent", "critical", "c", "r1",
                       node, "host", "firing", t0, t0, 1.0, "silent", fired_ts=t0)
        sink = AlertmanagerSink(f"http://{server.address}", resend_s=60.0)
        sink.send([Notice(silent), Notice(xid_alert(48, node=node, t0=t0))])
        for codes in ((48,), (48, 64)):
            sink.send([Notice(xid_alert(*codes, node=node, t0=t0))])
            want = am_labels(xid_alert(*codes, node=node, t0=t0))["remedy"]
            got = until(lambda w=want: [a for a in active(server, node)
                                        if a["labels"].get("remedy") == w
                                        and a["status"]["inhibitedBy"]])
            assert got, f"{want} not inhibited"
        assert sorted(a["labels"].get("remedy", "") for a in active(server, node)) == ["", "rma"]
    finally:
        server.stop()
