"""Notifications (``Notification``) as line protocol, and back: the same layout for
InfluxDB and VictoriaMetrics, as every part of one is a bounded name (a sink, a state,
an outcome, why muted: ``silence:ID``, ``inhibited:ALERT_ID``, ``ack:BY``) or a time.

Measurement ``fleetwatch_notification``; tags alert_id, sink, state, outcome, muted_by,
rule, severity, cluster, rack, node, device; fields ``ts`` (the stream's time) and
``sent_ts`` (the wall clock); stamped at ``ts`` to the ms (where the alert's changes
and events are), so a record written again is the same point."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields

from fleetwatch.pipeline.store.base import Notification
from fleetwatch.pipeline.store.lineproto import tags

NOTIFY_MEASUREMENT = "fleetwatch_notification"
_TAGS = [f.name for f in fields(Notification) if f.name not in ("ts", "sent_ts")]


def notification_line(n: Notification, v1: bool = False) -> str:
    pairs = [(k, getattr(n, k)) for k in _TAGS]
    return (f"{NOTIFY_MEASUREMENT}{tags(pairs, v1)} ts={n.ts!r},sent_ts={n.sent_ts!r} "
            f"{round(n.ts * 1000)}")


def notification_from(labels: Mapping[str, str], numbers: Mapping[str, float]
                      ) -> Notification | None:
    if "ts" not in numbers or not labels.get("alert_id"):
        return None
    return Notification(numbers["ts"], numbers.get("sent_ts", numbers["ts"]),
                        **{k: labels.get(k, "") for k in _TAGS})


def select_notes(notes: Sequence[Notification | None], start_ts: float, end_ts: float,
                 alert_ids: Sequence[str] | None) -> list[Notification]:
    """Those in [start, end) (of these alerts where given), once each, oldest first."""
    wanted = None if alert_ids is None else set(alert_ids)
    found = {n for n in notes if n is not None and start_ts <= n.ts < end_ts
             and (wanted is None or n.alert_id in wanted)}
    return sorted(found, key=lambda n: (n.ts, n.sent_ts, n.sink, n.alert_id))
