"""A silence that ends after a processor restart pages nothing that receivers were told of
before the silence and that has not changed since: the restarted notifier rebuilds "told
before" from the store's record of notifications (``takeover.told_before``), as one that
ran through the silence knows it. Pure logic here; over real stores in
``tests/store/test_told_before_restart.py``."""

from __future__ import annotations

import time
from collections.abc import Sequence

from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.takeover import told_before
from fleetwatch.pipeline.store.base import Alert, Notification, Silence
from tests.recording_sink import Recording

T0 = float(int(time.time())) - 300  # adopt judges silences on the wall clock (in this one)


def silent(t: float = T0, severity: str = "critical") -> Alert:
    return Alert("node_silent/c/n1/host/1", "node_silent", severity, "c", "r1", "n1", "host",
                 "firing", t - 60, t, 60.0, "n1 sent nothing", fired_ts=t)


def note(ts: float, outcome: str, muted_by: str = "", severity: str = "critical",
         sink: str = "recording") -> Notification:
    return Notification(ts, ts + 0.5, sink, silent().id, "node_silent", severity, "c", "r1",
                        "n1", "host", "firing", outcome, muted_by)


def test_told_before_reads_a_delivery_then_a_muting_as_told() -> None:
    rows = [note(T0, "queued"), note(T0, "sent"), note(T0 + 100, "muted", "silence:s1")]
    assert told_before(silent(), ["recording"], rows)
    assert not told_before(silent(), ["recording", "other"], rows)    # other: never told
    assert not told_before(silent(severity="warning"), ["recording"], rows)
    assert not told_before(silent(), ["recording"], rows[:1])          # handed, no outcome
    assert not told_before(silent(), ["recording"], rows[2:])          # muted from its start
    # Muted, then handed again muted the same way: it changed meanwhile (a new revision).
    changed = [*rows, note(T0 + 200, "muted", "silence:s1")]
    assert not told_before(silent(), ["recording"], changed)
    given_up = [note(T0, "queued"), note(T0 + 1, "given_up"), rows[2]]
    assert not told_before(silent(), ["recording"], given_up)


def run(notifier: Notifier, t: float) -> None:
    notifier.send([], now=t)


def test_a_restart_within_a_silence_does_not_page_the_unchanged_alert_at_its_end() -> None:
    record: list[Notification] = []

    def recorded(ids: Sequence[str]) -> list[Notification]:
        return [n for n in record if n.alert_id in ids]

    silences: list[Silence] = []
    first = Recording()
    before = Notifier([first], silences=lambda: list(silences), background=False,
                      reload_s=0.0, record=record.extend, recorded=recorded)
    alert = silent()
    before.send([alert], now=T0)
    assert [n.alert.id for n in first.sent if n.notify] == [alert.id]
    silences.append(Silence("s1", (parse_matcher("node=n1"),), T0 + 10, T0 + 3600, "oncall"))
    run(before, T0 + 20)
    assert [(n.outcome, n.muted_by) for n in record][-1] == ("muted", "silence:s1")
    before.close()

    after = Recording()  # the processor restarted within the silence
    restarted = Notifier([after], silences=lambda: list(silences), background=False,
                         reload_s=0.0, record=record.extend, recorded=recorded)
    restarted.adopt([alert])
    run(restarted, T0 + 30)
    silences.clear()                                    # expired by hand
    run(restarted, T0 + 40)
    assert [n for n in after.sent if n.notify] == []
    # A change after the silence is news: paged.
    restarted.send([silent(T0 + 50, "warning")], now=T0 + 50)
    assert [n.alert.severity for n in after.sent if n.notify] == ["warning"]
