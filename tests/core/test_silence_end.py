"""When a silence ends (a maintenance window closes): an alert whose subject is already
clear (a node rebooted inside the window and reporting again, held firing only by
``keep_firing_s``) is not paged as firing, and is paged if its finding comes back; an
alert a receiver was told of before the silence, unchanged since, is not paged again
(Alertmanager's notification log does the same), while one that changed (severity, a new
revision) or was never delivered is."""

from __future__ import annotations

from dataclasses import replace

from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Alert, Silence
from tests.core.test_alerts import REQ, drive, frame
from tests.recording_sink import Recording


def paged(sink: Recording) -> list[tuple[str, str]]:
    return [(n.alert.rule, n.alert.state) for n in sink.sent if n.notify]


def window(start: float, end: float, *matchers: str) -> Silence:
    return Silence("maint", tuple(parse_matcher(m) for m in matchers or ("node=n1",)),
                   start, end, "alice", "reboot")


def silent(ts: float, state: str = "firing") -> Alert:
    return Alert(f"node_silent/c/n1/host/{ts:g}", "node_silent", "critical", "c", "r1", "n1",
                 "host", state, ts - 60, ts, 60.0, "n1 has sent nothing for 60 s",
                 fired_ts=ts)


def notifier(sink: Recording, silences: list[Silence]) -> Notifier:
    return Notifier([sink], silences=lambda: list(silences), background=False, reload_s=0.0,
                    attempts=1, retry_s=0.0)


# -- D2: an alert clear again when its silence ends -----------------------------------------
def test_the_book_says_which_firing_alerts_are_clear_and_held_by_keep_firing() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ, keep_firing_s=300)
    drive(book, rule, [frame(100, [90])])
    (alert,) = book.open
    assert book.clearing() == frozenset()
    drive(book, rule, [frame(120, [70])])               # clear, held firing
    assert book.clearing() == {alert.id}
    drive(book, rule, [frame(140, [91])])               # hot again
    assert book.clearing() == frozenset()


def test_a_node_back_before_its_silence_ends_is_not_paged_when_it_ends() -> None:
    sink = Recording()
    n = notifier(sink, [window(0, 1000)])
    alert = silent(500)
    (muted,) = n.send([alert], 500)
    assert muted.muted_by == "silence:maint"
    n.send([], 600, clearing={alert.id})                 # the node reports again at 560
    n.send([], 1005, clearing={alert.id})                # the window ended: still clear
    assert paged(sink) == []
    n.send([replace(alert, state="resolved", updated_ts=860 + 300, resolved_ts=1160)], 1160,
           clearing=frozenset())
    assert [(r, s) for r, s in paged(sink) if s == "firing"] == []


def test_a_node_still_silent_when_its_silence_ends_is_paged() -> None:
    sink = Recording()
    n = notifier(sink, [window(0, 1000)])
    n.send([silent(500)], 500)
    n.send([], 1005, clearing=frozenset())
    assert paged(sink) == [("node_silent", "firing")]


def test_one_clear_at_the_end_that_goes_silent_again_is_paged_then() -> None:
    sink = Recording()
    n = notifier(sink, [window(0, 1000)])
    alert = silent(500)
    n.send([alert], 500)
    n.send([], 1005, clearing={alert.id})
    assert paged(sink) == []
    n.send([], 1100, clearing=frozenset())               # its finding is back
    assert paged(sink) == [("node_silent", "firing")]
    n.send([], 1200, clearing=frozenset())
    assert paged(sink) == [("node_silent", "firing")]    # once


# -- D10: an alert told before the silence, unchanged at its end -----------------------------
def test_an_alert_paged_before_a_silence_is_not_paged_again_at_its_end_unchanged() -> None:
    sink = Recording()
    silences: list[Silence] = []
    n = notifier(sink, silences)
    alert = silent(500)
    n.send([alert], 500)
    assert paged(sink) == [("node_silent", "firing")]
    silences.append(window(600, 1000))
    (muted,) = n.send([], 700)
    assert muted.muted_by == "silence:maint"
    n.send([], 1005)
    assert paged(sink) == [("node_silent", "firing")]    # not twice


def test_a_severity_change_under_the_silence_is_paged_at_its_end() -> None:
    sink = Recording()
    silences: list[Silence] = []
    n = notifier(sink, silences)
    alert = replace(silent(500), severity="warning")
    n.send([alert], 500)
    silences.append(window(600, 1000))
    n.send([], 700)
    n.send([replace(alert, severity="critical", updated_ts=800)], 800)
    n.send([], 1005)
    assert [n.alert.severity for n in sink.sent if n.notify] == ["warning", "critical"]


def test_an_alert_never_delivered_before_the_silence_is_paged_at_its_end() -> None:
    sink = Recording(fail=True)
    silences: list[Silence] = []
    n = notifier(sink, silences)
    alert = silent(500)
    n.send([alert], 500)                                 # the receiver was down: failed
    sink.fail = False
    silences.append(window(600, 1000))
    n.send([], 700)
    n.send([], 1005)
    assert paged(sink) == [("node_silent", "firing")]


def test_the_webhook_hears_nothing_of_a_node_back_before_its_window_ended() -> None:
    """Through the real webhook sink to a real receiver: no firing when the silence ends,
    and no resolve of an alert it was never told of."""
    from fleetwatch.pipeline.sinks.webhook import WebhookSink
    from tests.sinks.conftest import Receiver

    receiver = Receiver()
    try:
        n = Notifier([WebhookSink(receiver.url, timeout_s=5)],
                     silences=lambda: [window(0, 1000)], background=False, reload_s=0.0)
        alert = silent(500)
        n.send([alert], 500)
        n.send([], 1005, clearing={alert.id})
        n.send([replace(alert, state="resolved", updated_ts=1160, resolved_ts=1160)], 1160,
               clearing=frozenset())
    finally:
        receiver.close()
    assert receiver.bodies == []
