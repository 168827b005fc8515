"""What was notified is recorded in the store (postmortems): each alert change per
notifying sink, muted (and by what) as it is decided, sent once the sink took it, given up
or failed when it did not."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.notified import Recorder
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Notification
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.sinks.conftest import Receiver, frame, tmp_store


def test_sent_and_acked_changes_are_recorded_per_sink(receiver: Receiver,
                                                     tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    notifier = Notifier([WebhookSink(receiver.url)], acks=store.acks, background=False,
                        reload_s=0, record=store.write_notifications)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notify=notifier.send)
    processor.process([frame(100, [95])])
    (alert,) = store.alerts()
    store.write_acks([Acknowledgement(alert.id, 110, "oncall")])
    processor.process([frame(300, [96])])
    processor.process([frame(315, [60])])
    got = [(n.ts, n.sink, n.alert_id, n.state, n.outcome, n.muted_by)
           for n in store.notifications(0, 1e9)]
    # each change to tell is owed ("queued") before it is handed over, then its outcome
    assert got == [(100.0, "webhook", alert.id, "firing", "queued", ""),
                   (100.0, "webhook", alert.id, "firing", "sent", ""),
                   (300.0, "webhook", alert.id, "firing", "muted", "ack:oncall"),
                   (315.0, "webhook", alert.id, "resolved", "queued", ""),
                   (315.0, "webhook", alert.id, "resolved", "sent", "")]
    # what the receiver heard matches the record
    states = [a["state"] for b in receiver.bodies for g in b["groups"] for a in g["alerts"]]
    assert states == ["firing", "resolved"]
    assert store.notifications(0, 1e9, alert_ids=["other"]) == []


def test_an_older_file_gains_the_table_and_a_read_only_reader_of_one_without_it_reads_none(
        tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE notifications")
    assert SqliteStore(path, read_only=True).notifications(0, 1e9) == []
    SqliteStore(path).write_notifications(
        [Notification(1.0, 2.0, "webhook", "a1", "r", "warning", "c", "r1", "n1", "gpu0",
                      "firing", "sent")])
    assert [n.alert_id for n in SqliteStore(path, read_only=True).notifications(0, 9)] == ["a1"]


def test_a_store_refusing_the_record_keeps_it_for_the_next_write() -> None:
    written: list[list[Notification]] = []
    fail = [True]

    def write(notes: object) -> None:
        if fail[0]:
            raise OSError("disk full")
        written.append(list(notes))  # type: ignore[call-overload]

    alert = Alert("a1", "r", "critical", "c", "r1", "n1", "gpu0", "firing", 1, 1, 1, "m",
                  fired_ts=1)
    rec = Recorder(write, ["webhook", "am"], clock=lambda: 50.0)
    rec.outcomes([("webhook", [Notice(alert)], "sent", 40.0)],
                 [Notice(alert), Notice(alert, "silence:s1")], 10)
    assert written == []
    fail[0] = False
    rec.record([], 11)
    assert [(n.sink, n.outcome, n.muted_by, n.sent_ts) for n in written[0]] == [
        ("webhook", "sent", "", 40.0),  # only the sink that reported delivery
        ("webhook", "muted", "silence:s1", 50.0), ("am", "muted", "silence:s1", 50.0),
        ("webhook", "queued", "", 50.0), ("am", "queued", "", 50.0)]  # handed to both


def test_what_the_store_refused_gets_a_last_try_at_close(receiver: Receiver,
                                                         tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    refuse = [True]

    def write(notes: object) -> None:
        if refuse[0]:
            raise OSError("database is locked")
        store.write_notifications(notes)  # type: ignore[arg-type]

    notifier = Notifier([WebhookSink(receiver.url)], background=False, record=write)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notify=notifier.send)
    processor.process([frame(100, [95])])
    assert store.notifications(0, 1e9) == []
    refuse[0] = False
    notifier.close()
    assert [(n.state, n.outcome) for n in store.notifications(0, 1e9)] == [
        ("firing", "queued"), ("firing", "sent")]
