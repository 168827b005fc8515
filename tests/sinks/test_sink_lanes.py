"""Each sink on its own thread (a slow or down sink delays only itself), and a webhook's
changes held through an outage and delivered once it is back (how sinks see silences and
adopted alerts: ``test_sink_muting``)."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier, SinkError
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from fleetwatch.retry import Backoff
from tests.servers import Server
from tests.sinks.conftest import Receiver, fast, tmp_store, until

LOGGER = "fleetwatch.pipeline.sinks"


def alert(name: str, state: str = "firing", node: str = "n1", rule: str = "gpu_temp_high",
          device: str = "gpu0", ts: float = 1_000.0) -> Alert:
    return Alert(f"{rule}/c/{node}/{device}/{name}", rule, "critical", "c", "r1", node, device,
                 state, ts - 30, ts, 91.0, f"{name} at 91 °C", fired_ts=ts,  # type: ignore[arg-type]
                 resolved_ts=ts + 60 if state == "resolved" else None)


# Not ``tests.recording_sink.Recording``: the lanes are judged by every call (adopt, forget,
# mutes, ticks) and the thread it came on.
class Recording:
    """An Alertmanager-like sink: records what it gets and its ticks, and on which thread."""

    name, notify_only = "alertmanager", True

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.ticks = 0
        self.threads: set[str] = set()

    def _on(self, kind: str, what: object) -> None:
        self.threads.add(threading.current_thread().name)
        self.calls.append((kind, what))

    def send(self, changes: list[Notice]) -> None:
        self._on("send", [n.alert.id.split("/")[-1] for n in changes])

    def tick(self) -> None:
        self.threads.add(threading.current_thread().name)
        self.ticks += 1

    def adopt(self, notices: list[Notice]) -> None:
        self._on("adopt", [(n.alert.id.split("/")[-1], n.muted_by) for n in notices])

    def forget(self, nodes: set[str]) -> None:
        self._on("forget", sorted(nodes))

    def mutes(self, silences: list[Silence], acks: dict[str, Acknowledgement]) -> None:
        self._on("mutes", ([s.id for s in silences], sorted(a.by for a in acks.values())))

    def sends(self) -> list[object]:
        return [what for kind, what in self.calls if kind == "send"]

    def close(self) -> None:
        pass


class Stuck:
    """A webhook that hangs (``block``) or is down (``down``: every call fails)."""

    name, notify_only = "webhook", True

    def __init__(self, how: str) -> None:
        self.how = how
        self.busy, self.release = threading.Event(), threading.Event()
        self.done: list[list[str]] = []
        self.tries = 0

    def send(self, changes: list[Notice]) -> None:
        self.tries += 1
        self.busy.set()
        if self.how == "down" and not self.release.is_set():
            raise SinkError("webhook http://127.0.0.1:1/hook unreachable")
        self.release.wait(30)
        self.done.append([n.alert.id.split("/")[-1] for n in changes])

    def close(self) -> None:
        pass


# -- oncall #1: one slow or down sink must not delay another -------------------------------
@pytest.mark.parametrize("how", ["block", "down"])
def test_a_slow_or_down_webhook_delays_neither_the_other_sinks_changes_nor_its_ticks(
        how: str) -> None:
    slow, am = Stuck(how), Recording()
    notifier = Notifier([slow, am], tick_s=0.01, backoff=lambda: Backoff(5.0, 5.0))
    try:
        notifier.send([alert("a0")])
        assert slow.busy.wait(10)                  # the webhook is stuck on the first batch
        notifier.send([alert("a1")])
        notifier.send([alert("a2")])
        ticks = am.ticks
        # Alertmanager got every batch and kept ticking while the webhook hangs or fails.
        assert until(lambda: len(am.sends()) == 3 and am.ticks >= ticks + 3)
        assert am.sends() == [["a0"], ["a1"], ["a2"]]
        assert slow.done == []
        assert am.threads == {"alert-sink-alertmanager"}
    finally:
        slow.release.set()
        notifier.close()
    # The webhook gets them too once it answers (held while down: the latest of each, once).
    got = sorted(a for batch in slow.done for a in batch)
    assert got == ["a0", "a1", "a2"]
    assert notifier.stats.sinks["webhook"].failed == 0
    assert notifier.stats.sinks["alertmanager"].sent == 3


def test_the_queue_bound_and_drops_are_per_sink() -> None:
    slow, am = Stuck("block"), Recording()
    notifier = Notifier([slow, am], queue_max=1, tick_s=0.01)
    notifier.send([alert("a0")])
    assert slow.busy.wait(10)
    # Alertmanager took a0 off its queue of one before a1 comes (else a1 would drop it).
    assert until(lambda: len(am.sends()) == 1)
    for i in range(1, 4):                            # the webhook is stuck on a0: a1, a2 dropped
        notifier.send([alert(f"a{i}")])
        assert until(lambda i=i: len(am.sends()) == i + 1)  # Alertmanager keeps up: none
    slow.release.set()
    notifier.close()
    assert slow.done == [["a0"], ["a3"]]
    assert am.sends() == [["a0"], ["a1"], ["a2"], ["a3"]]
    assert (notifier.stats.sinks["webhook"].dropped, notifier.stats.sinks["alertmanager"].dropped,
            notifier.stats.dropped) == (2, 0, 2)


# -- oncall #4: a webhook outage must not lose a page ----------------------------------------
class Hook(Receiver):
    """A real local webhook receiver whose answer is ``code`` (200, 500, 400...; 0: hang
    until ``release``)."""

    def states(self, body: dict) -> list[tuple[str, str]]:
        return [(a["id"].split("/")[-1], a["state"]) for g in body["groups"] for a in g["alerts"]]


@pytest.fixture
def hook() -> object:
    h = Hook()
    yield h
    h.close()


def _am_alerts(am: Server, node: str) -> list[dict]:
    url = f"http://{am.address}/api/v2/alerts?filter=" + urllib.parse.quote(f'node="{node}"')
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def test_a_hanging_webhook_does_not_hold_back_the_real_alertmanager(am: Server,
                                                                     hook: Hook) -> None:
    """oncall #1 with the real sinks: the webhook answers nothing (each try waits for its
    5 s timeout), Alertmanager has the alert while the webhook is still hanging."""
    node = f"node-lanes-{time.time_ns()}"
    hook.code = 0
    notifier = Notifier([WebhookSink(hook.url, timeout_s=5),
                         AlertmanagerSink(f"http://{am.address}", resend_s=60)])
    try:
        notifier.send([alert("a", node=node, ts=time.time())])
        assert until(lambda: _am_alerts(am, node))
        # The webhook's lane runs beside Alertmanager's: its first try may start after.
        assert until(lambda: hook.requests >= 1) and hook.bodies == []   # and it hangs on
        # counted once its lane has Alertmanager's answer (it has the alert before that)
        assert until(lambda: notifier.stats.sinks["alertmanager"].sent == 1)
        hook.code = 200
        hook.release.set()
        assert until(lambda: hook.bodies)
    finally:
        notifier.close()
    assert {str(hook.states(b)) for b in hook.bodies} == {str([("a", "firing")])}


def _logged(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_a_webhook_outage_loses_no_page_and_the_receiver_learns_each_alerts_latest_state(
        hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    notifier = Notifier([WebhookSink(hook.url, timeout_s=5)], attempts=2, backoff=fast)
    try:
        notifier.send([alert("x")])                  # fired and told before the outage
        assert until(lambda: len(hook.bodies) == 1)
        hook.code = 500                              # the receiver fails for a while
        notifier.send([alert("y")])                  # a critical page during the outage
        notifier.send([alert("x", "resolved")])      # x recovered meanwhile
        notifier.send([alert("z")])                  # z fired and resolved meanwhile
        notifier.send([alert("z", "resolved")])
        # tried, and tried again, with every change of the outage held (taken off the
        # queue: one still queued when the receiver is back would be a third post)
        assert until(lambda: hook.requests >= 6 and notifier.outages()["webhook"][1] == 3)
        hook.code = 200
        assert until(lambda: len(hook.bodies) == 2)
    finally:
        notifier.close()
    assert [hook.states(b) for b in hook.bodies] == [
        [("x", "firing")], [("y", "firing"), ("x", "resolved"), ("z", "resolved")]]
    # z fired and resolved while the receiver was down: its resolve says it was never told
    # z fired (a ticket to close for x, an incident it never heard of for z).
    told = {a["id"][-1]: a.get("firing_notified") for g in hook.bodies[1]["groups"]
            for a in g["alerts"]}
    assert told == {"y": None, "x": True, "z": False}
    counts = notifier.stats.sinks["webhook"]
    assert (counts.sent, counts.failed) == (2, 0) and notifier.stats.failed == 0
    assert counts.retries == hook.requests - 2       # every failed try is counted
    # Logged when the outage starts and ends, not at each of the retries.
    warnings = _logged(caplog, logging.WARNING)
    assert len(warnings) == 3 and hook.requests - 2 > 3
    assert "holding 1 alert changes and retrying for up to 600s (alerts.sink_retry_s)" in (
        warnings[1])
    assert warnings[2].startswith("alert sink webhook is back after ")
    assert warnings[2].endswith(": 3 held alert changes delivered")
    assert _logged(caplog, logging.ERROR) == []


def test_changes_held_past_the_retry_window_are_given_up_counted_and_logged_once(
        hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    hook.code = 500
    notifier = Notifier([WebhookSink(hook.url, timeout_s=5)], attempts=1, backoff=fast,
                        retry_s=0.2)
    try:
        notifier.send([alert("a")])
        assert until(lambda: notifier.stats.sinks["webhook"].failed == 1)
        notifier.send([alert("b")])
        assert until(lambda: notifier.stats.sinks["webhook"].failed == 2)
        (error,) = _logged(caplog, logging.ERROR)    # once for the outage, not per change
        assert error.startswith("alert sink webhook down for ")
        assert (": 1 alert changes held longer than alerts.sink_retry_s (0.2s) given up, not "
                "delivered there: webhook ") in error
        # The receiver comes back just after c is held. Its comeback is not left to when
        # the lane's next try falls (every 10 to 50 ms: one that went through before c
        # was held would post a and b alone): the lane's next try hangs until c is queued
        # behind it and fails; the one after goes through.
        hook.answers = [0]
        assert until(lambda: not hook.answers)       # the lane waits on that try
        notifier.send([alert("c")])
        hook.answers = [200]
        hook.release.set()
        assert until(lambda: len(hook.bodies) == 1)
        hook.code = 200
    finally:
        notifier.close()
    # a and b, given up but still firing, are re-sent with c: the receiver learns them.
    assert [hook.states(b) for b in hook.bodies] == [
        [("a", "firing"), ("b", "firing"), ("c", "firing")]]
    assert notifier.stats.by_sink == {"webhook": 2} and notifier.stats.failed == 2
    assert _logged(caplog, logging.WARNING)[-1].endswith(
        ": 1 held alert changes delivered, 2 given up, 2 still firing that it missed re-sent")


def test_a_refusal_is_not_retried_even_in_an_outage(hook: Hook) -> None:
    notifier = Notifier([WebhookSink(hook.url, timeout_s=5)], attempts=2, backoff=fast)
    try:
        hook.code = 400
        notifier.send([alert("a")])
        assert until(lambda: notifier.stats.failed == 1)
        assert hook.requests == 1
        hook.code = 500
        notifier.send([alert("b")])                  # held after 2 tries
        assert until(lambda: hook.requests >= 4)
        hook.code = 400                              # then refused: given up at once
        assert until(lambda: notifier.stats.failed == 2)
        refused = hook.requests
        hook.code = 200
        notifier.send([alert("c")])
        assert until(lambda: len(hook.bodies) == 1)
    finally:
        notifier.close()
    assert hook.requests == refused + 1
    assert [hook.states(b) for b in hook.bodies] == [[("c", "firing")]]
    assert "refused the alerts (400)" in notifier.stats.last_error


def test_retry_s_0_keeps_the_bounded_attempts_only(hook: Hook) -> None:
    hook.code = 500
    notifier = Notifier([WebhookSink(hook.url, timeout_s=5)], attempts=3, backoff=fast,
                        retry_s=0)
    notifier.send([alert("a")])
    assert until(lambda: notifier.stats.failed == 1)
    hook.code = 200
    notifier.send([alert("b")])
    assert until(lambda: ("b", "firing") in [s for b in hook.bodies for s in hook.states(b)])
    notifier.close()
    # a, not held (retry_s 0), is still firing: re-sent once the webhook takes a post
    # (the re-sync's tick, or with b), once.
    assert sorted(s for b in hook.bodies for s in hook.states(b)) == [
        ("a", "firing"), ("b", "firing")]


def test_sink_retry_s_is_range_checked_and_reaches_the_notifier(hook: Hook,
                                                                tmp_path: Path) -> None:
    from fleetwatch.config import ConfigError, load
    from fleetwatch.wiring import open_notifier

    with pytest.raises(ConfigError, match="alerts.sink_retry_s"):
        load(None, env={"FLEETWATCH_ALERTS_SINK_RETRY_S": "-1"})
    assert load(None, env={}).alerts.sink_retry_s == 600.0
    config = load(None, env={"FLEETWATCH_ALERTS_WEBHOOK_URL": hook.url,
                             "FLEETWATCH_ALERTS_SINK_RETRY_S": "0",
                             "FLEETWATCH_ALERTS_SINK_ATTEMPTS": "1"})
    hook.code = 500
    notifier = open_notifier(config, tmp_store(tmp_path))
    notifier.send([alert("a")])
    assert until(lambda: notifier.stats.failed == 1)   # not held: given up after 1 try
    notifier.close()
    assert hook.requests == 1
