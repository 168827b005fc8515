"""A severity change of an open alert is news: the room alert back under its critical line
is a warning again in the store, and the webhook (a new notification_id) and Alertmanager
hear it; in Alertmanager, where severity is a label and another label set another alert,
the critical set is resolved and exactly one alert, the warning, stays active."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.parse
import urllib.request

from fleetwatch.models.room import RoomInlet
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.base import notification_id
from fleetwatch.pipeline.store.base import Alert
from tests.models.test_room import fleet, replace_for
from tests.recording_sink import Recording
from tests.servers import Server


def test_a_room_back_under_its_critical_line_is_notified_as_a_warning() -> None:
    detector = RoomInlet(replace_for(60.0))
    book = AlertBook(requirements=detector.rules)
    sink = Recording("webhook")
    notifier = Notifier([sink], background=False)
    for k, inlet in enumerate([38.0] * 8 + [30.0] * 40):
        frames = fleet(15.0 * k, [inlet] * 4)
        changes = book.observe(frames, detector.update(frames))
        book.apply(changes)
        notifier.send(changes, now=15.0 * k)
    assert [(a.state, a.severity) for a in book.open if a.rule == "room_inlet_hot"] == [
        ("firing", "warning")]
    heard = [n for n in sink.sent if n.notify]
    assert [(n.alert.state, n.alert.severity) for n in heard] == [
        ("firing", "critical"), ("firing", "warning")]
    assert notification_id(heard[0]) != notification_id(heard[1])


def test_a_severity_change_alone_is_a_new_notification() -> None:
    sink = Recording("webhook")
    notifier = Notifier([sink], background=False)
    room = Alert("room_inlet_hot/c/*/1", "room_inlet_hot", "critical", "c", "*", "", "rack:*",
                 "firing", 900.0, 1000.0, 33.0, "room", fired_ts=1000.0)
    notifier.send([room])
    notifier.send([dataclasses.replace(room, updated_ts=1100.0)])  # the same: not again
    notifier.send([dataclasses.replace(room, severity="warning", updated_ts=1200.0)])
    assert [n.alert.severity for n in sink.sent] == ["critical", "warning"]
    assert notification_id(sink.sent[0]) != notification_id(sink.sent[1])


def test_alertmanager_holds_one_alert_with_the_current_severity(am: Server) -> None:
    cluster, t0 = f"deesc-{time.time_ns()}", time.time() - 900
    room = Alert(f"room_inlet_hot/{cluster}/*/1", "room_inlet_hot", "critical", cluster, "*",
                 "", "rack:*", "firing", t0 - 300, t0, 33.0,
                 "room inlet 33 °C, above the 32 °C allowable limit", fired_ts=t0)
    notifier = Notifier([AlertmanagerSink(f"http://{am.address}", resend_s=60.0)],
                        background=False)
    notifier.send([room])
    notifier.send([dataclasses.replace(room, severity="warning", updated_ts=t0 + 600,
                                       value=30.0, message="room inlet 30 °C")])
    notifier.close()
    url = f"http://{am.address}/api/v2/alerts?active=true&filter=" + urllib.parse.quote(
        f'cluster="{cluster}"')

    def active() -> list[str]:
        with urllib.request.urlopen(url, timeout=5) as r:
            return sorted(a["labels"]["severity"] for a in json.load(r))  # not ended
    deadline = time.monotonic() + 10
    while active() != ["warning"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert active() == ["warning"]
