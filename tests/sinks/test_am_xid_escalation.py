"""An XID alert whose action escalates (48 "drain and reset" then 64 "RMA") reaches
Alertmanager's receivers as a new alert would: its ``remedy`` label changes, the label set
posted before is posted resolved at that moment. Codes of the same or a lower rank change
only annotations, which Alertmanager does not notify. The payloads first (the HTTP post
captured); against a real Alertmanager: test_am_xid_escalation_live.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fleetwatch.models import RANK, REVISION
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import alertmanager as am_module
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink, ack_labels, am_labels
from fleetwatch.pipeline.sinks.am_payload import posted_sets
from fleetwatch.pipeline.sinks.base import SinkError, iso
from fleetwatch.pipeline.store.base import Acknowledgement, Alert
from fleetwatch.xids import describe, remedy, xid_evidence

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
