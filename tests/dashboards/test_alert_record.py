"""The Alerts page says what the store recorded: a resolved alert's acknowledgement (who,
when, why) and what was notified; times of another day carry their date."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetwatch.dashboards import alert_tables, components, data
from fleetwatch.dashboards import alerts as alerts_page
from fleetwatch.pipeline.store.base import Acknowledgement, Notification
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.fakes import NOW, alert
from tests.dashboards.test_alert_table import rows
from tests.dashboards.test_data import text_of

DAY = 86400.0


def test_times_of_another_day_carry_their_date() -> None:
    assert components.stamp(NOW - 60, NOW) == "07:59:00"
    assert components.stamp(NOW - 3 * DAY, NOW) == "2027-01-12 08:00:00"
    old = dataclasses.replace(alert("node-a", 3, "resolved", started_ago_s=3 * DAY),
                              resolved_ts=NOW - 2 * DAY)
    (row,) = rows(alert_tables.alert_table([old], NOW, "t"))
    text = text_of(row)
    assert "2027-01-12 08:01:00 UTC" in text and "ended 2027-01-13 08:00:00 UTC" in text
    today = alert("node-a", 3, "firing")
    assert "07:51:00 UTC · 9 min ago" in text_of(rows(alert_tables.alert_table([today], NOW,
                                                                               "t"))[0])


def test_a_resolved_alerts_row_shows_its_ack_and_notifications(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "f.db")
    done = alert("node-a", 3, "resolved", rule="gpu_xid_critical")
    store.write_alerts([done])
    store.write_acks([Acknowledgement(done.id, NOW - 300, "bob", "drained, RMA-77")])
    store.write_notifications([Notification(
        NOW - 540, NOW - 539, "webhook", done.id, done.rule, done.severity, done.cluster,
        done.rack, done.node, done.device, "firing", "sent")])
    acks, notified = data.read_record(store, [done], NOW)
    recorded = alert_tables.record_notes([done], acks, notified, NOW)
    _, resolved = alerts_page.tables([], [done], NOW, "24h", {}, recorded=recorded)
    text = text_of(resolved)
    assert "acknowledged by bob at 07:55:00 UTC: drained, RMA-77" in text
    assert "notified: firing sent to webhook 07:51:00" in text


def test_a_page_handed_over_reads_not_confirmed_until_its_outcome(tmp_path: Path) -> None:
    """``queued``: handed to the sink, no outcome recorded (the processor was killed
    first): not shown as sent; once an outcome follows, only the outcome is shown."""
    store = SqliteStore(tmp_path / "f.db")
    a = alert("node-a", 3, "firing", rule="gpu_xid_critical")
    store.write_alerts([a])

    def note(outcome: str, sent_ts: float) -> Notification:
        return Notification(NOW - 540, sent_ts, "webhook", a.id, a.rule, a.severity,
                            a.cluster, a.rack, a.node, a.device, "firing", outcome)

    store.write_notifications([note("queued", NOW - 539)])
    said = alert_tables.record_notes([a], *data.read_record(store, [a], NOW), NOW)[a.id]
    assert said == "notified: firing handed to webhook, not confirmed 07:51:00"
    store.write_notifications([note("sent", NOW - 538)])
    said = alert_tables.record_notes([a], *data.read_record(store, [a], NOW), NOW)[a.id]
    assert said == "notified: firing sent to webhook 07:51:00"


def test_an_open_alerts_ack_note_gains_its_time_and_comment() -> None:
    a = alert("node-a", 3, "firing")
    ack = Acknowledgement(a.id, NOW - 120, "ana", "on it")
    said = alert_tables.record_notes([a], {a.id: ack}, {}, NOW, {a.id: "acknowledged by ana"})
    assert said == {a.id: "acknowledged by ana at 07:58:00 UTC: on it"}


def _note(a, ago_s: float, sink: str, state: str, outcome: str,  # type: ignore[no-untyped-def]
          muted_by: str = "") -> Notification:
    return Notification(NOW - ago_s, NOW - ago_s, sink, a.id, a.rule, a.severity, a.cluster,
                        a.rack, a.node, a.device, state, outcome, muted_by)


def test_the_record_shows_each_sink_with_the_silence_that_muted_it() -> None:
    """A node silent inside a maintenance silence, paged when it ended: the page shows, per
    sink, that it was muted by the silence, then sent, then resolved (the last three records
    over all sinks hid the silence and what Alertmanager got)."""
    done = alert("node-009", 0, "resolved", rule="node_silent")
    records = [
        _note(done, 600, "alertmanager", "firing", "muted", "silence:6e0312a2e676"),
        _note(done, 600, "webhook", "firing", "muted", "silence:6e0312a2e676"),
        _note(done, 540, "alertmanager", "firing", "muted", "silence:6e0312a2e676"),
        _note(done, 300, "alertmanager", "firing", "sent"),
        _note(done, 300, "webhook", "firing", "sent"),
        _note(done, 270, "webhook", "resolved", "sent"),
        _note(done, 270, "alertmanager", "resolved", "sent"),
    ]
    (text,) = alert_tables.record_notes([done], {}, {done.id: records}, NOW).values()
    assert text == (
        "notified: firing muted at alertmanager (silence:6e0312a2e676) "
        "07:50:00 (2 times), firing sent to alertmanager 07:55:00, resolved sent to "
        "alertmanager 07:55:30; firing muted at webhook (silence:6e0312a2e676) "
        "07:50:00, firing sent to webhook 07:55:00, resolved sent to webhook 07:55:30")


def test_a_long_record_keeps_each_sinks_first_and_last() -> None:
    a = alert("node-a", 3, "firing", rule="gpu_xid_critical")
    records = [_note(a, 600 - 60 * i, "webhook", "firing", "sent" if i % 2 else "muted",
                     "" if i % 2 else f"silence:s{i}") for i in range(8)]
    (text,) = alert_tables.record_notes([a], {}, {a.id: records}, NOW).values()
    assert text.startswith("notified: firing muted at webhook (silence:s0) 07:50:00, ")
    assert "… 4 more, " in text and text.endswith("firing sent to webhook 07:57:00")
