"""The store contract, what the notifier keeps: silences, acknowledgements and the record of
notifications (what is still owed at a takeover), on every backend."""

from __future__ import annotations

import dataclasses
import time

from fleetwatch.pipeline.store.base import Acknowledgement, Notification, Silence
from tests.store.backends import Backend
from tests.store.helpers import cluster_name

# Matchers as users write them, and as a careless client could: regular expressions with
# backslashes, quotes, separators of line protocol, an empty value, non-ASCII text, and
# one value that looks like another operator.
AWKWARD = (("node", "=~", r"node-0(0[1-9]|1\d)\\?"), ("rule", "!=", 'a "quoted", b=c d'),
           ("rack", "=", ""), ("device", "!~", "gpu[0-3]|höst"), ("severity", "=", "~x\\"))


def test_silences_round_trip_exactly_and_are_replaced_by_id(backend: Backend) -> None:
    """A silence's matchers are its identity: every backend gives them back exactly."""
    # A silence made now: a time to the ms (``fleetwatch silence`` makes them so).
    store, now = backend.store, round(time.time(), 3)
    tag = cluster_name()
    on = Silence(f"{tag}-on", (("cluster", "=", tag), *AWKWARD), now - 600, now + 3600,
                 "ops-alice", "fan swap on node-007, ticket 4411")
    later = Silence(f"{tag}-later", (("cluster", "=", tag), ("node", "=", "node-003")),
                    now + 86_400, now + 2 * 86_400, "bob", "")
    over = Silence(f"{tag}-over", (("cluster", "=", tag),), now - 7200, now - 3600, "", "x")
    store.write_silences([on, later])
    store.write_silences([over])
    backend.settle()

    def mine(active_at: float | None = None) -> list[Silence]:
        return [s for s in store.silences(active_at) if s.id.startswith(tag)]

    kept = backend.silence_as_kept
    assert mine() == [kept(over), kept(on), kept(later)]  # oldest start first
    assert mine(now) == [kept(on)]
    assert mine(now + 86_400 + 1) == [kept(later)]
    assert mine(now - 3600) == []  # [start, end): ended just then
    # Expired (its end moved), and one rewritten with other matchers: replaced, not doubled.
    ended = dataclasses.replace(on, end_ts=now)
    moved = dataclasses.replace(later, matchers=(("cluster", "=", tag), ("rack", "=~", "r.*")))
    store.write_silences([ended, moved])
    backend.settle()
    assert mine() == [kept(over), kept(ended), kept(moved)]
    assert mine(now) == []
    # A pending one cancelled (``silence expire``): never in force, its planned end kept.
    cancelled = dataclasses.replace(moved, end_ts=moved.start_ts, created_ts=now - 60,
                                    expired_ts=now, planned_end_ts=moved.end_ts)
    store.write_silences([cancelled])
    backend.settle()
    assert mine() == [kept(over), kept(ended), kept(cancelled)]
    assert mine(now + 86_400 + 1) == []


def test_acknowledgements_round_trip_and_are_replaced_by_alert_id(backend: Backend) -> None:
    store, now = backend.store, round(time.time(), 3)
    tag = cluster_name()
    first = Acknowledgement(f"gpu_temp/{tag}/node-0/gpu3/1", now - 60, "alice", "on it")
    other = Acknowledgement(f"xid/{tag}/node-1/gpu0/2", now - 30, "bob")
    store.write_acks([first, other])
    backend.settle()

    def mine() -> list[Acknowledgement]:
        return [a for a in store.acks() if tag in a.alert_id]

    kept = backend.ack_as_kept
    assert mine() == [kept(first), kept(other)]
    again = Acknowledgement(first.alert_id, now - 10, "carol", "taking over from alice")
    store.write_acks([again])
    backend.settle()
    assert mine() == [kept(other), kept(again)]


def test_notifications_round_trip_in_their_window_and_once_each(backend: Backend) -> None:
    """What the notifier recorded (``Notification``) reads back whole on every backend."""
    store, now = backend.store, float(int(time.time()))  # (whole seconds: see below)
    tag = cluster_name()
    aid = f"gpu_xid_critical/{tag}/node-2/gpu4/1"

    def note(ts: float, state: str, outcome: str, muted_by: str = "",
             sink: str = "webhook") -> Notification:
        return Notification(ts, ts + 0.5, sink, aid, "gpu_xid_critical", "critical", tag,
                            "rack-01", "node-2", "gpu4", state, outcome, muted_by)

    sent = note(now - 120, "firing", "sent")
    am = note(now - 120, "firing", "sent", sink="alertmanager")
    muted = note(now - 60, "resolved", "muted", f"inhibited:rack_cooling/{tag}//rack:r/9")
    store.write_notifications([sent, am, muted])  # type: ignore[attr-defined]
    store.write_notifications([sent])  # type: ignore[attr-defined]  (a retried write)
    backend.settle()
    read = store.notifications  # type: ignore[attr-defined]
    assert read(now - 600, now + 1, alert_ids=[aid]) == [am, sent, muted]
    assert read(now - 90, now + 1, alert_ids=[aid]) == [muted]
    assert read(now - 600, now + 1, alert_ids=["other"]) == []
    assert [n for n in read(now - 600, now + 1) if n.cluster == tag] == [am, sent, muted]


def test_what_is_owed_reads_back_from_every_backend(backend: Backend) -> None:
    """A change handed over (``queued``) and its outcome (``sent``) at the same stream time
    read back in order on every backend, so that a processor taking over re-sends only
    what is still owed (``queued`` alone: its predecessor was killed before an outcome)."""
    from fleetwatch.pipeline.sinks.notified import settled, undelivered
    from fleetwatch.wiring import _recorded

    # Whole and half seconds: VictoriaMetrics keeps a value to about 12 digits (an epoch time
    # with milliseconds came back 0.2 us off), and the notes are compared whole.
    store, now, tag = backend.store, float(int(time.time())), cluster_name()

    def note(node: str, outcome: str, sent_ts: float) -> Notification:
        return Notification(now - 60, sent_ts, "webhook", f"gpu_temp_high/{tag}/{node}/gpu0/1",
                            "gpu_temp_high", "warning", tag, "rack-01", node, "gpu0",
                            "firing", outcome)

    done = [note("node-1", "queued", now - 59.5), note("node-1", "sent", now - 59.0)]
    killed = note("node-2", "queued", now - 59.5)
    store.write_notifications([done[1], killed])  # type: ignore[attr-defined]
    store.write_notifications([done[0]])  # type: ignore[attr-defined]  (written later)
    ids = [done[0].alert_id, killed.alert_id]
    read = _recorded(store)
    assert read is not None
    # What was written becomes readable (VictoriaMetrics: after a flush, and on a loaded
    # machine a moment later): read until it is, for at most 15 s.
    deadline = time.monotonic() + 15
    while True:
        backend.settle()
        owed = undelivered(ids, "webhook", read(ids))
        notes = store.notifications(now - 600, now + 1,  # type: ignore[attr-defined]
                                    alert_ids=ids)
        if (owed, settled(notes)) == ({killed.alert_id}, [killed, done[1]]) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert owed == {killed.alert_id}
    assert settled(notes) == [killed, done[1]]
