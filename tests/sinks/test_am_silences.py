"""fleetwatch's muting reaches Alertmanager (oncall #2, #3, #5): an alert posted before it
was muted keeps being re-sent (no false "resolved"), and fleetwatch's silences and
acknowledgements become Alertmanager silences, reconciled without duplicates.

The decision (``am_silences.plan``) is tested pure; the sink against a real Alertmanager
(Debian's), read back from its API: what it holds is the ground truth.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from typing import Any

import pytest

from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink, am_labels
from fleetwatch.pipeline.sinks.am_silences import (
    CREATED_BY,
    AlertmanagerSilences,
    plan,
    silence_wanted,
    ts,
)
from fleetwatch.pipeline.sinks.base import iso
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from tests.servers import Server
from tests.sinks.test_alertmanager import am_alerts


def firing(node: str, device: str = "gpu0") -> Alert:
    now = time.time()
    return Alert(f"gpu_temp_high/c/{node}/{device}/1", "gpu_temp_high", "critical", "c", "r1",
                 node, device, "firing", now - 60, now, 91.0, "GPU at 91 °C", fired_ts=now - 30,
                 evidence={"gpu_temp_c": 91.0})


def resolved(a: Alert) -> Alert:
    now = time.time()
    return Alert(a.id, a.rule, a.severity, a.cluster, a.rack, a.node, a.device, "resolved",
                 a.started_ts, now, 60.0, a.message, fired_ts=a.fired_ts, resolved_ts=now)


class Clock:
    """Wall time plus a skew the test moves on, so that a re-send is due without sleeping."""

    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew


def sink_for(am: Server, clock: Clock | None = None) -> AlertmanagerSink:
    return AlertmanagerSink(f"http://{am.address}", resend_s=60.0, clock=clock or Clock())


def fw_silences(am: Server, node: str) -> list[dict[str, Any]]:
    """fleetwatch's live silences in Alertmanager that name this node (any state but
    expired), from its API."""
    got = AlertmanagerSilences(f"http://{am.address}", 5).list()
    return [s for s in got if s["createdBy"].startswith(CREATED_BY)
            and s["status"]["state"] != "expired"
            and (node in s["comment"] or any(m["value"] == node for m in s["matchers"]))]


def silence_by_id(am: Server, silence_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{am.address}/api/v2/silence/{silence_id}",
                                timeout=5) as r:
        return json.load(r)


def ends(a: dict[str, Any]) -> str:
    return a["endsAt"]


# -- the decision, pure ---------------------------------------------------------------------
def test_a_silence_becomes_the_same_matchers_under_alertmanager_label_names() -> None:
    s = Silence("s1", (parse_matcher("rule=~gpu_.*"), parse_matcher("node=n1"),
                       parse_matcher("severity!=info")), 100.0, 4000.0, "ops", "swap fans")
    w = silence_wanted(s, now=200.0)
    assert w is not None and w.key == "silence s1"
    assert w.matchers == (("alertname", "gpu_.*", True, True), ("node", "n1", False, True),
                          ("scope", "gpu|node|rack", True, True),
                          ("severity", "info", False, False))
    assert w.comment == "fleetwatch silence s1 by ops: swap fans"
    assert silence_wanted(s, now=4000.0) is None  # ended: not mirrored


def _have(sid: str, key: str, matchers: tuple, ends_ts: float, by: str = CREATED_BY,
          state: str = "active") -> dict[str, Any]:
    return {"id": sid, "createdBy": by, "comment": f"fleetwatch {key} by x",
            "status": {"state": state}, "startsAt": iso(0), "endsAt": iso(ends_ts),
            "matchers": [{"name": n, "value": v, "isRegex": r, "isEqual": e}
                         for n, v, r, e in matchers]}


def test_duplicates_keep_the_smallest_id_and_others_are_left_alone() -> None:
    s = Silence("s1", (parse_matcher("node=n1"),), 100.0, 4000.0, "ops")
    w = silence_wanted(s, 200.0)
    assert w is not None
    have = [_have("b", "silence s1", w.matchers, 4000.0),
            _have("a", "silence s1", w.matchers, 4000.0),
            _have("c", "silence gone", w.matchers, 4000.0),         # no longer in fleetwatch
            _have("d", "silence gone", w.matchers, 4000.0, state="expired"),
            _have("e", "silence s9", w.matchers, 4000.0, by="alice"),  # a person's
            _have("f", "ack other/alert", w.matchers, 4000.0)]      # another owner's ack
    todo = plan([w], have, mine=lambda key: key.startswith("silence"))
    assert (todo.create, todo.update, sorted(todo.expire)) == ([], [], ["b", "c"])
    assert plan([w], [], mine=lambda key: True).create == [w]      # missing: created


# -- against a real Alertmanager ------------------------------------------------------------
def test_a_silenced_alert_stays_active_there_suppressed_by_the_mirrored_silence(
        am: Server) -> None:
    node = f"node-msil-{time.time_ns()}"
    clock = Clock()
    sink = sink_for(am, clock)
    alert = firing(node)
    sink.send([Notice(alert)])                        # fired, paged
    (before,) = am_alerts(am, node)
    silence = Silence(f"fw-{node}", (("node", "=", node),), time.time() - 1, time.time() + 600,
                      "ops", "maintenance")
    sink.mutes([silence], {})                         # the notifier's reload
    sink.send([Notice(alert, f"silence:{silence.id}")])
    clock.skew += 60.0                                # one resend interval later
    sink.tick()
    (got,) = am_alerts(am, node)
    assert ends(got) > ends(before), "no longer re-sent: Alertmanager would page resolved"
    (mirrored,) = fw_silences(am, node)
    assert got["status"] == {"state": "suppressed", "silencedBy": [mirrored["id"]],
                             "inhibitedBy": []}
    assert mirrored["comment"] == f"fleetwatch silence {silence.id} by ops: maintenance"
    assert {(m["name"], m["value"]) for m in mirrored["matchers"]} == {
        ("node", node), ("scope", "gpu|node|rack")}

    sink.mutes([], {})                                # the silence removed in fleetwatch
    assert silence_by_id(am, mirrored["id"])["status"]["state"] == "expired"
    assert fw_silences(am, node) == []
    (after,) = am_alerts(am, node)
    assert after["status"]["state"] == "active"       # notified again, never resolved


@pytest.mark.parametrize("muted_by", ["silence:s1", "inhibited:node_silent/c/n/host/1"])
def test_an_alert_muted_after_it_was_posted_is_still_re_sent(am: Server, muted_by: str) -> None:
    """oncall #2: letting it lapse makes Alertmanager page "resolved" for a firing GPU."""
    node = f"node-mkeep-{time.time_ns()}"
    clock = Clock()
    sink = sink_for(am, clock)
    alert = firing(node)
    sink.send([Notice(alert)])
    (before,) = am_alerts(am, node)
    sink.send([Notice(alert, muted_by)])
    clock.skew += 60.0
    sink.tick()
    (after,) = am_alerts(am, node)
    assert ends(after) > ends(before)


def test_a_muted_alert_that_resolves_is_posted_resolved(am: Server) -> None:
    node = f"node-mres-{time.time_ns()}"
    sink = sink_for(am)
    alert = firing(node)
    sink.send([Notice(alert)])
    assert am_alerts(am, node)
    sink.send([Notice(alert, "inhibited:node_silent/c/x/host/1")])
    assert am_alerts(am, node)                        # kept while it fires
    sink.send([Notice(resolved(alert), "inhibited:node_silent/c/x/host/1")])
    assert am_alerts(am, node) == []                  # ended there now, not 4 resends later


def test_an_alert_muted_from_the_start_is_never_posted(am: Server) -> None:
    node = f"node-mnew-{time.time_ns()}"
    clock = Clock()
    sink = sink_for(am, clock)
    sink.send([Notice(firing(node), "silence:s1")])
    clock.skew += 60.0
    sink.tick()
    assert am_alerts(am, node) == []


def test_an_ack_silences_that_alert_there_until_it_resolves(am: Server) -> None:
    node = f"node-mack-{time.time_ns()}"
    clock = Clock()
    sink = sink_for(am, clock)
    alert, other = firing(node), firing(node, "gpu1")
    sink.send([Notice(alert), Notice(other)])
    ack = Acknowledgement(alert.id, time.time(), "oncall", "draining")
    sink.mutes([], {alert.id: ack})
    (mirrored,) = fw_silences(am, node)
    assert mirrored["comment"] == f"fleetwatch ack {alert.id} by oncall: draining"
    assert {(m["name"], m["value"], m["isRegex"], m["isEqual"])
            for m in mirrored["matchers"]} == {(k, v, False, True)
                                               for k, v in am_labels(alert).items()}
    got = {a["labels"]["device"]: a["status"]["state"] for a in am_alerts(am, node)}
    assert got == {"gpu0": "suppressed", "gpu1": "active"}   # only the acked one

    clock.skew += 60.0                                # renewed with the re-send, in place
    sink.tick()
    (renewed,) = fw_silences(am, node)
    assert renewed["id"] == mirrored["id"] and ends(renewed) > ends(mirrored)

    sink.send([Notice(resolved(alert))])              # resolved: the ack silence goes first
    assert silence_by_id(am, mirrored["id"])["status"]["state"] == "expired"
    assert [a["labels"]["device"] for a in am_alerts(am, node)] == ["gpu1"]


def test_a_restarted_or_second_processor_makes_no_duplicate_silences(am: Server) -> None:
    node = f"node-mdup-{time.time_ns()}"
    silence = Silence(f"fw-{node}", (("node", "=", node),), time.time() - 1, time.time() + 600,
                      "ops")
    clock = Clock()
    first = sink_for(am, clock)
    first.mutes([silence], {})
    (made,) = fw_silences(am, node)
    restarted = sink_for(am, clock)                   # a new process: no memory of it
    restarted.mutes([silence], {})
    assert [s["id"] for s in fw_silences(am, node)] == [made["id"]]

    # Two processors that both found it missing at once: one is kept, the same by both.
    w = silence_wanted(silence, time.time())
    assert w is not None
    AlertmanagerSilences(f"http://{am.address}", 5).put(
        w.body(time.time(), created_by=first.owner))
    assert len(fw_silences(am, node)) == 2
    keep = min(s["id"] for s in fw_silences(am, node))
    clock.skew += 60.0                                # their next pass, resend_s later
    restarted.mutes([silence], {})
    first.mutes([silence], {})
    assert [s["id"] for s in fw_silences(am, node)] == [keep]


def test_a_processor_leaves_the_ack_silences_of_alerts_it_does_not_own(am: Server) -> None:
    node = f"node-mown-{time.time_ns()}"
    alert = firing(node)
    ack = {alert.id: Acknowledgement(alert.id, time.time(), "oncall")}
    owner, other = sink_for(am), sink_for(am)
    owner.send([Notice(alert)])
    owner.mutes([], ack)
    (made,) = fw_silences(am, node)
    other.mutes([], {})                               # its acks: none of its own alerts
    assert [s["id"] for s in fw_silences(am, node)] == [made["id"]]


def test_a_restart_re_sends_adopted_silenced_alerts_without_paging(am: Server) -> None:
    """oncall #3: adopted with their muting, the silence mirrored before the re-send."""
    node = f"node-madopt-{time.time_ns()}"
    alert = firing(node)
    silence = Silence(f"fw-{node}", (("node", "=", node),), time.time() - 1, time.time() + 600,
                      "ops")
    sink = sink_for(am)
    sink.mutes([silence], {})                         # the notifier does this first
    sink.adopt([Notice(alert, f"silence:{silence.id}")])
    sink.tick()
    (got,) = am_alerts(am, node)
    assert got["status"]["state"] == "suppressed"
    assert got["status"]["silencedBy"] == [s["id"] for s in fw_silences(am, node)]


def test_alertmanager_unreachable_for_silences_is_logged_once_and_blocks_nothing(
        caplog: pytest.LogCaptureFixture, receiver) -> None:  # noqa: ANN001
    from tests.servers import free_port

    sink = AlertmanagerSink(f"http://127.0.0.1:{free_port()}", resend_s=60.0, timeout_s=1.0)
    silence = Silence("s1", (("node", "=", "n1"),), 0, 4e9, "ops")
    with caplog.at_level(logging.WARNING, "fleetwatch.pipeline.sinks.alertmanager"):
        sink.mutes([silence], {})
        sink.mutes([silence], {})
    assert sink.silence_errors == 2
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "could not mirror fleetwatch's silences" in warned[0]
    assert "unreachable" in warned[0]
    # Alert delivery goes its own way: a receiver that is up still gets the alert.
    sink.url = receiver.url
    sink.send([Notice(firing("n1"))])
    assert [b[0]["labels"]["node"] for b in receiver.bodies] == ["n1"]


def test_a_silence_alertmanager_keeps_after_its_end_changes_is_moved(am: Server) -> None:
    node = f"node-mend-{time.time_ns()}"
    t = time.time()
    sink = sink_for(am)
    sink.mutes([Silence(f"fw-{node}", (("node", "=", node),), t - 1, t + 600, "ops")], {})
    sink.mutes([Silence(f"fw-{node}", (("node", "=", node),), t - 1, t + 300, "ops")], {})
    (s,) = fw_silences(am, node)
    assert abs(ts(s["endsAt"]) - (t + 300)) < 0.01


def test_through_the_notifier_a_silence_added_in_fleetwatch_mutes_alertmanager(
        am: Server, tmp_path) -> None:  # noqa: ANN001
    """End to end with the notifier and a store: fired, then `fleetwatch silence add`, then
    a restart (a new notifier and sink adopting the open alert): never a page, never a
    "resolved", one mirrored silence."""
    from fleetwatch.pipeline.sinks import Notifier
    from tests.sinks.conftest import tmp_store

    node = f"node-mnotif-{time.time_ns()}"
    store = tmp_store(tmp_path)
    alert = firing(node)

    def notifier(clock: Clock) -> Notifier:
        return Notifier([sink_for(am, clock)], silences=store.silences, acks=store.acks,
                        background=False, reload_s=0)

    clock = Clock()
    first = notifier(clock)
    first.send([alert])
    (before,) = am_alerts(am, node)
    assert before["status"]["state"] == "active"
    store.write_silences([Silence(f"fw-{node}", (("node", "=", node),), time.time() - 1,
                                  time.time() + 600, "ops")])
    first.send([])                                     # the reload: mirrored
    clock.skew += 60.0
    first.sinks[0].tick()                              # the delivery thread's re-send
    (got,) = am_alerts(am, node)
    (mirrored,) = fw_silences(am, node)
    assert got["status"]["silencedBy"] == [mirrored["id"]] and ends(got) > ends(before)

    again = Clock()                                    # a restarted processor
    second = notifier(again)
    second.adopt([alert])
    second.send([])
    second.sinks[0].tick()
    (kept,) = am_alerts(am, node)
    assert kept["status"]["state"] == "suppressed"
    assert [s["id"] for s in fw_silences(am, node)] == [mirrored["id"]]
