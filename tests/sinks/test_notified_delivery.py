"""The record says ``sent`` only once the sink took the change (not when it was handed to
the sink's lane), ``given_up`` when it never did; and a processor that takes the firing
alert over sends it, once, to the sink its predecessor never reached."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier, SinkError
from fleetwatch.pipeline.sinks.notified import undelivered
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Notification
from fleetwatch.wiring import _recorded
from tests.sinks.conftest import Receiver, fast, frame, tmp_store, until


class FlakySink:
    """A notifying sink down for its first ``down`` sends."""

    name = "webhook"
    notify_only = True
    timeout_s = 0.0

    def __init__(self, down: int) -> None:
        self.down, self.took = down, []  # type: ignore[var-annotated]

    def send(self, changes: Sequence[Notice]) -> bool:
        if self.down > 0:
            self.down -= 1
            raise SinkError("connection refused")
        self.took += [n.alert.id for n in changes]
        return True

    def close(self) -> None:
        pass


def outcomes(store: object) -> list[tuple[str, str, str]]:
    return [(n.sink, n.state, n.outcome)
            for n in store.notifications(0, 1e10)]  # type: ignore[attr-defined]


def test_sent_is_recorded_when_the_sink_takes_it_not_when_it_is_handed_over(
        tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    sink = FlakySink(down=1)
    notifier = Notifier([sink], background=False, attempts=1, backoff=fast,
                        record=store.write_notifications)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notify=notifier.send)
    processor.process([frame(100, [95])])
    # held: not delivered, not "sent"; owed ("queued") from before the first try
    assert sink.took == [] and outcomes(store) == [("webhook", "firing", "queued")]
    assert until(lambda: (notifier.send([]), sink.took)[1], 5)  # the held change's retry
    notifier.send([])
    assert outcomes(store) == [("webhook", "firing", "queued"), ("webhook", "firing", "sent")]


def test_a_change_given_up_is_recorded_so(tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    sink = FlakySink(down=100)
    notifier = Notifier([sink], background=False, attempts=1, backoff=fast,
                        record=store.write_notifications)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notify=notifier.send)
    processor.process([frame(100, [95])])
    notifier.close(timeout_s=1)
    assert outcomes(store) == [("webhook", "firing", "queued"),
                               ("webhook", "firing", "given_up")]


def test_undelivered_needs_a_record_of_the_alert_at_that_sink_and_no_firing_sent() -> None:
    def rec(alert_id: str, sink: str, state: str, outcome: str) -> Notification:
        return Notification(1, 1, sink, alert_id, "r", "critical", "c", "r1", "n1", "gpu0",
                            state, outcome)

    rows = [rec("given", "webhook", "firing", "given_up"),
            rec("sent", "webhook", "firing", "given_up"), rec("sent", "webhook", "firing", "sent"),
            rec("elsewhere", "am", "firing", "given_up"),
            rec("muted", "webhook", "firing", "muted")]
    assert undelivered(["given", "sent", "elsewhere", "muted", "unrecorded"], "webhook",
                       rows) == {"given", "muted"}


def test_a_page_given_up_at_a_redirect_is_sent_once_by_the_restarted_processor(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The hunter's case: the webhook URL answers 307 (never followed), the processor stops
    (given up at close), a new one starts with the right URL: the receiver gets it once."""
    store = tmp_store(tmp_path)
    redirect, right = Receiver(answers=[307] * 50), Receiver()
    try:
        first = Notifier([WebhookSink(redirect.url, timeout_s=2)], backoff=fast,
                         record=store.write_notifications, recorded=_recorded(store))
        processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notifier=first)
        processor.process([frame(100, [95])])
        assert until(lambda: redirect.requests >= 1)
        first.close(timeout_s=2)
        assert redirect.bodies == []
        assert outcomes(store) == [("webhook", "firing", "queued"),
                                   ("webhook", "firing", "given_up")]

        caplog.set_level(logging.WARNING, "fleetwatch.pipeline.sinks")
        second = Notifier([WebhookSink(right.url, timeout_s=2)], backoff=fast,
                          record=store.write_notifications, recorded=_recorded(store))
        again = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notifier=second)
        again.process([frame(110, [95])])  # still firing: adopted from the store
        assert until(lambda: right.bodies)
        again.process([frame(120, [95])])
        second.close(timeout_s=2)
        (alert,) = store.alerts()
        got = [(a["id"], a["state"]) for b in right.bodies
               for g in b["groups"] for a in g["alerts"]]  # type: ignore[index]
        assert got == [(alert.id, "firing")]
        assert outcomes(store) == [("webhook", "firing", "queued"),
                                   ("webhook", "firing", "given_up"),
                                   ("webhook", "firing", "sent")]
        assert "never delivered there (given up before, or the processor before stopped " \
            "first); sending them now" in caplog.text

        # A third start: delivered now, not sent again.
        third = Notifier([WebhookSink(right.url, timeout_s=2)], backoff=fast,
                         record=store.write_notifications, recorded=_recorded(store))
        last = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notifier=third)
        last.process([frame(130, [95])])
        third.close(timeout_s=2)
        assert len(right.bodies) == 1
    finally:
        redirect.close()
        right.close()


def test_a_change_not_delivered_is_not_shown_as_sent_or_muted() -> None:
    from fleetwatch.alert_view import notified_line
    from fleetwatch.pipeline.sinks.notified import outcome_text

    n = Notification(1.8e9, 1.8e9, "webhook", "a1", "r", "critical", "c", "r1", "n1", "gpu0",
                     "firing", "given_up")
    assert outcome_text(n) == "not delivered to webhook (given up)"
    assert "firing not delivered to webhook (given up)" in notified_line([n])
