"""A change handed to a notifying sink is recorded as owed (``queued``) before the sink is
tried, so that a processor killed before the outcome leaves a record its successor reads
back and re-sends; the outcome supersedes it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from fleetwatch.alert_view import notified_line
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.notified import outcome_text, settled, undelivered
from fleetwatch.pipeline.store.base import Notification
from fleetwatch.timeline import _notified
from tests.sinks.conftest import tmp_store, until
from tests.sinks.test_sink_lanes import alert


def rec(alert_id: str, outcome: str, ts: float, sent_ts: float | None = None,
        state: str = "firing", sink: str = "webhook") -> Notification:
    return Notification(ts, ts if sent_ts is None else sent_ts, sink, alert_id, "r",
                        "critical", "c", "r1", "n1", "gpu0", state, outcome)


def test_the_latest_outcome_of_a_firing_change_says_what_is_owed() -> None:
    rows = [rec("killed", "queued", 10),                                   # no outcome
            rec("done", "queued", 10), rec("done", "sent", 12),
            rec("revised", "queued", 10), rec("revised", "sent", 12),
            rec("revised", "queued", 20),                                  # a new revision
            rec("redone", "queued", 10), rec("redone", "given_up", 15),
            rec("redone", "sent", 30),                                     # re-sent later
            rec("same_time", "sent", 10, sent_ts=5.2), rec("same_time", "queued", 10, 5.1),
            rec("acked", "queued", 10), rec("acked", "sent", 11), rec("acked", "muted", 12),
            rec("muted", "muted", 10),
            rec("elsewhere", "queued", 10, sink="alertmanager")]
    ids = ["killed", "done", "revised", "redone", "same_time", "acked", "muted", "elsewhere",
           "unrecorded"]
    assert undelivered(ids, "webhook", rows) == {"killed", "revised", "muted"}
    assert undelivered(ids, "webhook", list(reversed(rows))) == {"killed", "revised", "muted"}
    assert undelivered(ids, "alertmanager", rows) == {"elsewhere"}


def test_a_queued_record_is_left_out_once_an_outcome_follows_and_reads_not_confirmed() -> None:
    rows = [rec("a", "queued", 10), rec("a", "sent", 12),
            rec("a", "queued", 20, state="resolved"),                     # stopped there
            rec("b", "queued", 10), rec("b", "muted", 11)]                # muting: no outcome
    assert [(n.alert_id, n.state, n.outcome) for n in settled(rows)] == [
        ("a", "firing", "sent"), ("a", "resolved", "queued"),
        ("b", "firing", "queued"), ("b", "firing", "muted")]
    owed = rows[2]
    assert outcome_text(owed) == "handed to webhook, not confirmed"
    assert "resolved handed to webhook, not confirmed" in notified_line([owed])
    assert "sent" not in notified_line([owed])
    entry = _notified(owed)
    assert entry.what == "not confirmed"
    assert entry.detail == "resolved to webhook, handed over, no outcome recorded"


class StoreLookingSink:
    """A notifying sink that, when it is tried, reads what the store says of the change."""

    name, notify_only, timeout_s = "webhook", True, 1.0

    def __init__(self, store: object) -> None:
        self.store, self.seen = store, []  # type: ignore[var-annotated]

    def send(self, changes: Sequence[Notice]) -> bool:
        self.seen.append([(n.alert_id, n.outcome) for n in
                          self.store.notifications(0, 1e10)])  # type: ignore[attr-defined]
        return True

    def close(self) -> None:
        pass


def test_the_change_is_owed_in_the_store_before_the_sink_is_tried(tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    sink = StoreLookingSink(store)
    notifier = Notifier([sink], record=store.write_notifications)
    try:
        a = alert("hot")
        notifier.send([a], now=1_000)
        assert until(lambda: sink.seen)
    finally:
        notifier.close()
    assert sink.seen == [[(a.id, "queued")]]
    assert [n.outcome for n in store.notifications(0, 1e10)] == ["queued", "sent"]


class TimedSink:
    """A notifying sink that notes when (monotonic) it got each alert."""

    name, notify_only, timeout_s = "webhook", True, 1.0

    def __init__(self) -> None:
        self.got: dict[str, float] = {}

    def send(self, changes: Sequence[Notice]) -> bool:
        self.got.update((n.alert.id.split("/")[-1], time.monotonic()) for n in changes)
        return True

    def close(self) -> None:
        pass


def test_a_store_away_or_hanging_does_not_hold_a_page_back() -> None:
    """The alert could not be stored (``stored`` False), or the record's last write
    failed: the page goes to the lanes first, the record is tried after (and kept)."""
    written: list[Notification] = []
    away = [True]

    def write(notes: Sequence[Notification]) -> None:
        if away[0]:
            time.sleep(1.0)  # a store that hangs until its timeout
            raise OSError("timed out")
        written.extend(notes)

    sink = TimedSink()
    notifier = Notifier([sink], record=write)
    try:
        t0 = time.monotonic()
        notifier.send([alert("away")], now=1_000, stored=False)
        assert until(lambda: "away" in sink.got) and sink.got["away"] - t0 < 0.5
        t1 = time.monotonic()
        notifier.send([alert("still", ts=1_001)], now=1_001)  # the record still failing
        assert until(lambda: "still" in sink.got) and sink.got["still"] - t1 < 0.5
        away[0] = False
        notifier.send([], now=1_002)
    finally:
        notifier.close()
    assert sorted(f"{n.alert_id.split('/')[-1]} {n.outcome}" for n in written) == [
        "away queued", "away sent", "still queued", "still sent"]
    # each outcome after its hand-over: nothing owed
    assert undelivered([alert("away").id, alert("still", ts=1_001).id], "webhook",
                       written) == set()


def test_a_lanes_outcome_is_recorded_without_a_send_and_nothing_written_when_none() -> None:
    """No batch comes (no frame reaches the processor): its tick records what the lanes
    reported (``record_reported``), at the time the lane reported it; a tick with nothing
    reported writes nothing."""
    writes: list[list[Notification]] = []
    sink = TimedSink()
    notifier = Notifier([sink], record=lambda notes: writes.append(list(notes)))
    try:
        assert notifier.record_reported() is False and writes == []
        handed = time.time()
        notifier.send([alert("quiet")], now=1_000)
        assert until(lambda: "quiet" in sink.got)
        assert until(notifier.record_reported, timeout_s=5.0)
        reported_by = time.time()
        assert notifier.record_reported() is False  # nothing new: no write
    finally:
        notifier.close()
    assert [[n.outcome for n in w] for w in writes] == [["queued"], ["sent"]]
    sent = writes[1][0]
    assert sent.ts == 1_000 and handed <= sent.sent_ts <= reported_by
