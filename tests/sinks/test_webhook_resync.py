"""What a ticketing webhook is told: after an outage longer than ``alerts.sink_retry_s`` the
alerts still firing are re-sent once it is back; no "resolved" for an alert it was never
told fired; every change carries a ``notification_id`` (and each POST an
``Idempotency-Key``) that is the same on every retry and new for a new change. Against a
real local HTTP server."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from dataclasses import replace

import pytest

from fleetwatch.pipeline.inhibition import incident_joined
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.base import notification_id
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from tests.servers import free_port
from tests.sinks.conftest import fast, until
from tests.sinks.test_sink_http_hardening import RawServer, ok, raw
from tests.sinks.test_sink_lanes import LOGGER, Hook, _logged, alert, hook

__all__ = ["hook", "raw"]  # the fixtures, used by name


def _changes(body: dict) -> list[dict]:
    return [a for g in body["groups"] for a in g["alerts"]]


def test_a_webhook_back_after_a_give_up_learns_the_alerts_still_firing(
        hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    hook.code = 500
    notifier = Notifier([WebhookSink(hook.url, timeout_s=5)], attempts=1, backoff=fast,
                        retry_s=0.2, tick_s=0.05)
    try:
        notifier.send([alert("crit")])                # fires while the webhook is down
        notifier.send([alert("gone")])
        notifier.send([alert("gone", "resolved")])    # fired and resolved meanwhile
        assert until(lambda: notifier.stats.sinks["webhook"].failed >= 1)  # given up
        hook.code = 200                               # back; no new change comes
        assert until(lambda: len(hook.bodies) == 1)
        time.sleep(0.3)                               # nothing more is re-sent
    finally:
        notifier.close()
    (body,) = hook.bodies
    assert hook.states(body) == [("crit", "firing")]  # "gone" ended: nothing to re-send
    assert _changes(body)[0]["notification_id"] == notification_id(Notice(alert("crit")))
    back = _logged(caplog, logging.WARNING)[-1]
    assert back.startswith("alert sink webhook is back after ")
    assert back.endswith("1 still firing that it missed re-sent")


def test_no_resolve_for_an_alert_seen_firing_only_muted_and_others_say_if_told(
        hook: Hook) -> None:
    sink = WebhookSink(hook.url, timeout_s=5)
    assert sink.send([Notice(alert("muted"), "silence:s1")]) is False
    assert sink.send([Notice(alert("muted", "resolved"))]) is False    # never to be told
    assert sink.send([Notice(alert("told"))]) is True
    assert sink.send([Notice(alert("told", "resolved"))]) is True
    # Fired and resolved within one batch (a processor catching up): the receiver learns
    # it happened, marked as never told it fired.
    assert sink.send([Notice(alert("blip", "resolved"))]) is True
    assert [hook.states(b) for b in hook.bodies] == [
        [("told", "firing")], [("told", "resolved")], [("blip", "resolved")]]
    assert [_changes(b)[0].get("firing_notified") for b in hook.bodies] == [None, True, False]
    # One taken over firing from the processor before (told by it) is closed too.
    sink.adopt([Notice(alert("adopted"))])
    assert sink.send([Notice(alert("adopted", "resolved"))]) is True
    assert hook.states(hook.bodies[-1]) == [("adopted", "resolved")]


def test_retries_after_a_receiver_timeout_carry_the_same_keys(raw: RawServer) -> None:
    """The receiver does the work but answers after the sink's timeout: each retry carries
    the same ``notification_id`` and ``Idempotency-Key``, so it can drop the repeats."""
    release = threading.Event()

    def late(conn: socket.socket) -> None:
        release.wait(3.0)  # past the 1 s timeout
        ok(conn)

    raw.behaviours = [late, late]
    # 1 s: the answer in time must come within it on a loaded machine too.
    notifier = Notifier([WebhookSink(raw.url + "/hook", timeout_s=1.0)], attempts=3,
                        backoff=fast)
    try:
        notifier.send([alert("a")])
        assert until(lambda: len(raw.delivered) == 1)
        notifier.send([alert("a", "resolved")])
        assert until(lambda: len(raw.delivered) == 2)
    finally:
        release.set()
        notifier.close()
    bodies = [json.loads(body) for _, _, body in raw.requests]
    keys = [h["idempotency-key"] for _, h, _ in raw.requests]
    ids = [[c["notification_id"] for c in _changes(b)] for b in bodies]
    assert len(raw.requests) == 4                       # 3 tries of the firing, 1 resolve
    assert ids[0] == ids[1] == ids[2] and len(set(keys[:3])) == 1
    assert ids[3] != ids[0] and keys[3] != keys[0]
    assert ids[0][0].startswith("gpu_temp_high/c/n1/gpu0/a/firing/")


def test_a_new_change_has_a_new_notification_id() -> None:
    fired = alert("x")
    later = replace(alert("y", rule="gpu_temp_critical"), message="y at 95 °C")
    same = {notification_id(Notice(fired)), notification_id(Notice(replace(
        fired, updated_ts=fired.updated_ts + 60, value=92.0)))}  # a refresh: no news
    assert len(same) == 1
    news = [
        Notice(fired),
        Notice(incident_joined(fired, later)),                  # the page updated
        Notice(replace(fired, evidence={"revision": 2.0})),     # another XID joined
        Notice(fired, "silence:s1"),                            # muted since
        Notice(alert("x", "resolved")),
    ]
    assert len({notification_id(n) for n in news}) == len(news)


def test_alertmanager_is_not_back_while_only_muted_changes_went_nowhere(
        caplog: pytest.LogCaptureFixture) -> None:
    """Alertmanager down; a muted change is held, and its 'delivery' posts nothing: the
    sink is not said to be back."""
    caplog.set_level(logging.DEBUG, LOGGER)
    sink = AlertmanagerSink(f"http://127.0.0.1:{free_port()}", resend_s=0.05, timeout_s=1)
    notifier = Notifier([sink], attempts=1, backoff=fast, retry_s=0.2, tick_s=0.05)
    try:
        notifier.send([alert("a")])
        assert until(lambda: notifier.stats.sinks["alertmanager"].failed >= 1)
        sink._firing.clear()  # a resolved meanwhile, as far as re-sends go
        notifier._lanes[0].put("send", [Notice(alert("b"), "silence:s1")])
        time.sleep(0.5)
    finally:
        notifier.close(timeout_s=1)
    assert not [w for w in _logged(caplog, logging.WARNING) if " is back " in w]
