"""An XID alert whose action escalates (48 "drain and reset" then 64 "RMA") reaches
Alertmanager's receivers as a new alert would: its ``remedy`` label changes, the label set
posted before is posted resolved at that moment. Codes of the same or a lower rank change
only annotations, which Alertmanager does not notify. The payloads first (the HTTP post
captured), then a real Alertmanager with a webhook receiver and a short group_interval."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.models import RANK, REVISION
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks import alertmanager as am_module
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink, ack_labels, am_labels
from fleetwatch.pipeline.sinks.am_payload import posted_sets
from fleetwatch.pipeline.sinks.base import SinkError, iso
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Acknowledgement, Alert
from fleetwatch.xids import describe, remedy, xid_evidence
from tests.servers import Server, alertmanager
from tests.sinks.conftest import Receiver, tmp_store
from tests.sinks.test_am_silences import fw_silences
from tests.sinks.test_xid_alert_updates import xid_frame

T0 = 1_000_000.0


def xid_alert(*codes: int, state: str = "firing", node: str = "n1", t0: float = T0) -> Alert:
    """The critical XID alert of GPU 3 with these codes seen (one each, a second apart)."""
    seen = {c: [1.0, t0 + i, t0 + i] for i, c in enumerate(codes)}
    evidence = xid_evidence(seen)
    evidence[REVISION], evidence[RANK] = float(len(codes)), float(
        describe(int(evidence["xid"])).rank)
    return Alert(f"gpu_xid_critical/c/{node}/gpu3/1", "gpu_xid_critical", "critical", "c",
                 "r1", node, "gpu3", state, t0, t0 + len(codes), evidence["xid"],
                 f"XID {codes}", evidence=evidence, fired_ts=t0,
                 resolved_ts=t0 + 99 if state == "resolved" else None)


class Posts:
    """The sink's posts to /api/v2/alerts, captured; ``fail`` makes the next ones fail."""

    def __init__(self) -> None:
        self.bodies: list[list[dict[str, Any]]] = []
        self.fail = False

    def __call__(self, server: object, body: list[dict[str, Any]], *args: object,
                 **kw: object) -> None:
        if self.fail:
            raise SinkError("Alertmanager down")
        self.bodies.append(body)

    def last(self) -> list[tuple[str, str]]:
        """The last post: (remedy, firing|resolved) per alert."""
        now = iso(NOW)
        return [(p["labels"].get("remedy", ""), "firing" if p["endsAt"] > now else "resolved")
                for p in self.bodies[-1]]


NOW = 2_000_000.0


@pytest.fixture
def posts(monkeypatch: pytest.MonkeyPatch) -> Posts:
    p = Posts()
    monkeypatch.setattr(am_module, "post_json", p)
    return p


def sink() -> AlertmanagerSink:
    return AlertmanagerSink("http://127.0.0.1:1", resend_s=60.0, clock=lambda: NOW)


# -- the label -------------------------------------------------------------------------------
def test_an_xid_alert_is_labelled_with_the_class_of_its_worst_action() -> None:
    assert [remedy(c) for c in (13, 8, 63, 48, 79, 64)] == [
        "none", "restart", "reset", "drain", "reboot", "rma"]
    assert remedy(99999) == "restart"  # a code the table does not know: its default rank 1
    assert am_labels(xid_alert(48))["remedy"] == "drain"
    assert am_labels(xid_alert(48, 64))["remedy"] == "rma"
    assert am_labels(xid_alert(64, 48))["remedy"] == "rma"   # a lower one later: still RMA
    assert am_labels(xid_alert(48, 46))["remedy"] == "drain"  # same rank: same label set
    older = dataclasses.replace(xid_alert(48), evidence={"xid": 48.0, "count": 3.0})
    assert am_labels(older)["remedy"] == "drain"  # an older release's: from its one code
    temp = dataclasses.replace(xid_alert(48), rule="gpu_temp_high", evidence={"t": 91.0})
    assert "remedy" not in am_labels(temp)
    # An ack's silence matches the alert whatever its remedy: fleetwatch's ack holds.
    assert ack_labels(xid_alert(48)) == ack_labels(xid_alert(48, 64))
    assert "remedy" not in ack_labels(xid_alert(48))


# -- the payloads ----------------------------------------------------------------------------
def test_an_escalation_resolves_the_label_set_posted_and_fires_the_new_one(
        posts: Posts) -> None:
    s = sink()
    s.send([Notice(xid_alert(48))])
    assert posts.last() == [("drain", "firing")]
    s.send([Notice(xid_alert(48, 64))])
    assert posts.last() == [("rma", "firing"), ("drain", "resolved")]
    resolved = posts.bodies[-1][1]
    assert resolved["endsAt"] == iso(NOW)
    assert resolved["labels"] == am_labels(xid_alert(48))
    s._last_sent = float("-inf")
    s.tick()                                   # the re-send: only the new label set
    assert posts.last() == [("rma", "firing")]
    s.send([Notice(xid_alert(48, 64, 46, state="resolved"))])
    assert posts.last() == [("rma", "resolved")]


def test_codes_of_the_same_or_a_lower_rank_keep_the_label_set(posts: Posts) -> None:
    s = sink()
    s.send([Notice(xid_alert(48))])
    s.send([Notice(xid_alert(48, 46))])        # rank 4 too
    s.send([Notice(xid_alert(48, 46, 63))])    # rank 2
    assert [[p["labels"]["remedy"] for p in b] for b in posts.bodies] == [["drain"]] * 3
    other = dataclasses.replace(xid_alert(64), id="gpu_xid_critical/c/n1/gpu3/2")
    s.send([Notice(dataclasses.replace(xid_alert(48, 46, 63), state="resolved",
                                       resolved_ts=T0 + 9))])
    s.send([Notice(other)])
    s.send([Notice(dataclasses.replace(xid_alert(64, 48), id=other.id))])
    assert posts.last() == [("rma", "firing")]  # a lower one after the RMA: nothing resolved


def test_a_failed_post_keeps_the_superseded_label_set_for_the_next(posts: Posts) -> None:
    s = sink()
    s.send([Notice(xid_alert(48))])
    posts.fail = True
    with pytest.raises(SinkError):
        s.send([Notice(xid_alert(48, 64))])
    posts.fail = False
    s.send([Notice(xid_alert(48, 64))])        # the lane's retry of the same change
    assert posts.last() == [("rma", "firing"), ("drain", "resolved")]
    s.send([Notice(xid_alert(48, 64, 46))])
    assert posts.last() == [("rma", "firing")]


def test_an_escalation_that_resolves_before_it_was_posted_resolves_what_was(
        posts: Posts) -> None:
    """Alertmanager never had the RMA label set: a "resolved" of it would be news there."""
    s = sink()
    s.send([Notice(xid_alert(48))])
    s.send([Notice(xid_alert(48, 64, state="resolved"))])
    assert posts.last() == [("drain", "resolved")]


class Silences:
    """Alertmanager's silence API as the sink uses it, kept in memory; every call and
    every post (``Posts``) is logged in ``log`` in order."""

    def __init__(self, posts: Posts, log: list[str]) -> None:
        self.have: list[dict[str, Any]] = []
        self.log = log
        self.have_alerts: list[dict[str, Any]] = []
        posts_call = posts.__call__

        def logged(*args: Any, **kw: Any) -> None:
            posts_call(*args, **kw)
            log.append("post " + " ".join(f"{r}:{st}" for r, st in posts.last()))
        self.post = logged

    def list(self) -> list[dict[str, Any]]:
        return [dict(s) for s in self.have]

    def put(self, body: dict[str, Any]) -> None:
        self.have.append({**body, "id": f"s{len(self.have)}", "status": {"state": "active"}})
        self.log.append("silence")

    def expire(self, silence_id: str) -> None:
        for s in self.have:
            if s["id"] == silence_id:
                s["status"] = {"state": "expired"}
        self.log.append("expire")

    def alerts(self, matcher: str) -> list[dict[str, Any]]:
        return self.have_alerts


@pytest.fixture
def logged(posts: Posts, monkeypatch: pytest.MonkeyPatch) -> tuple[AlertmanagerSink, list[str]]:
    """A sink whose posts and silence calls are logged in order."""
    log: list[str] = []
    s = sink()
    s.silence_api = Silences(posts, log)  # type: ignore[assignment]
    monkeypatch.setattr(am_module, "post_json", s.silence_api.post)  # type: ignore[attr-defined]
    return s, log


def _ack(alert: Alert) -> dict[str, Acknowledgement]:
    return {alert.id: Acknowledgement(alert.id, NOW, "oncall")}


def test_an_acked_alert_that_escalates_keeps_the_set_notified_until_it_resolves(
        logged: tuple[AlertmanagerSink, list[str]]) -> None:
    """Muted by its ack (the webhook hears nothing): still re-sent with the new label set at
    once, under the ack's silence (it names no remedy). The set notified before stays firing
    while the ack mutes it: a "resolved" posted under a silence is dropped by Alertmanager,
    and its receiver (the new set may route elsewhere) would never hear it. When the alert
    resolves, every set is posted resolved under the silence (so that no flush pages the new
    set unmuted), the silence expired, then posted resolved again: heard once."""
    s, log = logged
    s.mutes([], {})
    s.send([Notice(xid_alert(48))])
    s.mutes([], _ack(xid_alert(48)))
    s.send([Notice(xid_alert(48, 64), "ack:oncall")])
    s._last_sent = float("-inf")
    s.tick()
    assert log == ["post drain:firing", "silence", "post rma:firing drain:firing",
                   "post rma:firing drain:firing"]
    del log[:]
    s.send([Notice(xid_alert(48, 64, state="resolved"))])
    assert log == ["post rma:resolved drain:resolved", "expire",
                   "post rma:resolved drain:resolved"]
    assert not s._posted


def test_a_held_set_is_resolved_once_the_alert_is_no_longer_muted(
        logged: tuple[AlertmanagerSink, list[str]]) -> None:
    s, log = logged
    s.mutes([], {})
    s.send([Notice(xid_alert(48))])
    s.send([Notice(xid_alert(48, 64), "silence:s1")])
    assert log[-1] == "post rma:firing drain:firing"
    s.send([Notice(xid_alert(48, 64))])          # the silence ended (the notifier rejudged)
    assert log[-1] == "post rma:firing drain:resolved"
    s._last_sent = float("-inf")
    s.tick()
    assert log[-1] == "post rma:firing"


def test_an_adopted_acked_escalation_resolves_every_set_alertmanager_has(
        logged: tuple[AlertmanagerSink, list[str]]) -> None:
    """A restart while an acked alert's superseded set is held: the new processor finds both
    sets in Alertmanager and resolves both when the alert resolves."""
    s, log = logged
    alert = xid_alert(48, 64)
    s.silence_api.have_alerts = [{"labels": am_labels(alert)},  # type: ignore[attr-defined]
                                 {"labels": am_labels(xid_alert(48))}]
    s.mutes([], _ack(alert))
    s.adopt([Notice(alert, "ack:oncall")])
    s.tick()
    assert log[-1] == "post rma:firing drain:firing"
    s.send([Notice(xid_alert(48, 64, state="resolved"))])
    assert log[-3:] == ["post rma:resolved drain:resolved", "expire",
                        "post rma:resolved drain:resolved"]


def _has(s: AlertmanagerSink, *label_sets: dict[str, str]) -> None:
    """Alertmanager, asked by ``adopt``, has these label sets."""
    s.silence_api.alerts = lambda matcher: [{"labels": lab} for lab in label_sets]  # type: ignore[method-assign]


def legacy(alert: Alert) -> dict[str, str]:
    """The labels an older release posted the alert under: no remedy."""
    return ack_labels(alert)


def test_posted_sets_are_every_label_set_alertmanager_has_for_the_alert() -> None:
    """An older release's first, then by rank; another GPU's and duplicates left out."""
    alert = xid_alert(48, 64)
    other = am_labels(xid_alert(48, node="n2"))
    have = [{"labels": am_labels(xid_alert(48))}, {"labels": other},
            {"labels": am_labels(alert)}, {"labels": legacy(alert)},
            {"labels": am_labels(xid_alert(48))}, {"nolabels": 1}, "junk"]
    assert posted_sets([alert], have) == {alert.id: [
        legacy(alert), am_labels(alert), am_labels(xid_alert(48))]}
    assert posted_sets([alert], [{"labels": am_labels(alert)}]) == {
        alert.id: [am_labels(alert)]}
    assert posted_sets([alert], [{"labels": other}]) == {}


def test_an_adopted_alert_keeps_its_label_set_and_a_forgotten_one_is_dropped(
        posts: Posts) -> None:
    s = sink()
    _has(s, am_labels(xid_alert(48, 64)))
    s.adopt([Notice(xid_alert(48, 64))])       # a restart: AM has what the store says
    s.tick()
    assert posts.last() == [("rma", "firing")]
    s.forget(["n1"])
    s.adopt([Notice(xid_alert(48, node="n2"))])
    s.tick()
    assert posts.last() == [("drain", "firing")]   # n1's neither re-sent nor resolved
    assert set(s._posted) == {xid_alert(48, node="n2").id}


def test_an_adopted_alert_whose_backlog_escalates_resolves_the_set_alertmanager_has(
        posts: Posts) -> None:
    """A restart: Alertmanager has the alert under the set the store says; the backlog the
    new processor reads first escalates it before any re-send."""
    s = sink()
    _has(s, am_labels(xid_alert(48)))
    s.adopt([Notice(xid_alert(48))])
    s.send([Notice(xid_alert(48, 64))])
    assert posts.last() == [("rma", "firing"), ("drain", "resolved")]


def test_an_adopted_alert_escalating_when_alertmanager_cannot_say_resolves_the_stored_set(
        posts: Posts) -> None:
    s = sink()                                  # http://127.0.0.1:1: nothing listens
    s.adopt([Notice(xid_alert(48))])
    s.send([Notice(xid_alert(48, 64))])
    assert posts.last() == [("rma", "firing"), ("drain", "resolved")]


# -- a real Alertmanager and its webhook receiver --------------------------------------------
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


def test_an_older_releases_alert_keeps_its_label_set_until_it_escalates(
        posts: Posts) -> None:
    """Upgrading pages nobody: Alertmanager has the alert without remedy, so it is re-sent
    so; a worse code later ends that set and fires the new one."""
    s = sink()
    _has(s, legacy(xid_alert(48)), am_labels(xid_alert(48, node="other")))
    s.adopt([Notice(xid_alert(48))])
    s.tick()
    assert posts.last() == [("", "firing")]
    s.send([Notice(xid_alert(48, 46))])       # the same rank: still the older set
    assert posts.last() == [("", "firing")]
    s.send([Notice(xid_alert(48, 46, 64))])
    assert posts.last() == [("rma", "firing"), ("", "resolved")]
    assert posts.bodies[-1][1]["labels"] == legacy(xid_alert(48))
    s.send([Notice(xid_alert(48, 46, 64, state="resolved"))])
    assert posts.last() == [("rma", "resolved")]


def test_an_adopted_older_releases_alert_that_resolves_resolves_its_set(posts: Posts) -> None:
    s = sink()
    _has(s, legacy(xid_alert(48)))
    s.adopt([Notice(xid_alert(48))])
    s.send([Notice(xid_alert(48, state="resolved"))])
    assert posts.last() == [("", "resolved")]


def test_an_escalation_stored_but_never_posted_is_notified_by_the_adopter(
        posts: Posts) -> None:
    """The owner stored 64 and died before its post: Alertmanager still has 48's set."""
    s = sink()
    _has(s, am_labels(xid_alert(48)))
    s.adopt([Notice(xid_alert(48, 64))])
    s.tick()
    assert posts.last() == [("rma", "firing"), ("drain", "resolved")]
    s._last_sent = float("-inf")
    s.tick()
    assert posts.last() == [("rma", "firing")]


def test_an_adopted_alert_is_posted_with_its_remedy_when_alertmanager_cannot_say(
        posts: Posts) -> None:
    s = sink()                                  # http://127.0.0.1:1: nothing listens
    s.adopt([Notice(xid_alert(48))])
    s.tick()
    assert posts.last() == [("drain", "firing")]


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
