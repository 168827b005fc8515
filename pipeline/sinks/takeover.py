"""Taking over firing alerts at the sinks (a restart, a partition moved): each sink that
keeps alerts alive is handed them, and each notifying sink is sent, once, those the
store's record of notifications (``sinks.notified``) shows it never took; and what the
record shows every notifying sink was told of a muted alert, unchanged since
(``told_before``), is known as heard, so that its silence ending pages nobody again."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence

from fleetwatch.pipeline.inhibition import RACK_DOWN_RULE
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.delivery import Lane
from fleetwatch.pipeline.sinks.notified import TOLD, never_told, undelivered
from fleetwatch.pipeline.store.base import Alert, Notification

log = logging.getLogger("fleetwatch.pipeline.sinks")


def read_record(recorded: Callable[[Sequence[str]], Iterable[Notification]] | None,
                firing: list[Notice]) -> list[Notification] | None:
    """The store's record of these alerts' notifications; None if there is none to read
    (no ``recorded``) or it cannot be read now."""
    if recorded is None:
        return None
    try:
        return list(recorded([n.alert.id for n in firing]))
    except Exception as exc:  # noqa: BLE001 - a store hiccup must not stop the takeover
        log.warning("could not read the record of notifications (%s): firing alerts a "
                    "processor before gave up at a sink are not re-sent, and muted ones "
                    "are kept as if posted", exc)
        return None


def adopt_at_sinks(lanes: Sequence[Lane], firing: list[Notice],
                   rows: list[Notification] | None, held: Collection[str] = ()) -> None:
    """``adopt`` at every sink that has it: a notifying sink is not handed the muted
    alerts the record shows it never had (kept quiet from their start, e.g. by a
    same-GPU cover, which Alertmanager has no rule for), nor those ``held`` (``held_over``):
    it would post them, as the processor before did not. Without a record, every one (it
    may have been posted)."""
    for lane in lanes:
        if not callable(getattr(lane.sink, "adopt", None)):
            continue
        kept = firing
        if rows is not None and getattr(lane.sink, "notify_only", False):
            quiet = never_told([n.alert.id for n in firing if n.muted_by or n.alert.id in held],
                               lane.sink.name, rows)
            kept = [n for n in firing if n.alert.id not in quiet]
        lane.put("adopt", kept)


def held_over(recorded: Callable[[Sequence[str]], Iterable[Notification]] | None,
              firing: Sequence[Notice], rows: Iterable[Notification], hold_s: float
              ) -> dict[str, float]:
    """Of the firing un-muted alerts taken over, those the processor before held as their
    rack's power came back (``News.hold``): only ever recorded muted, last by a rack-down
    alert (``rack_silent``) whose resolution is recorded. Alert id -> the stream time its
    hold ends: that resolution's plus ``hold_s``, as it would have without a restart (a
    node back by then is never posted, one still down is paged then, not at once)."""
    ids = {n.alert.id for n in firing if not n.muted_by}
    told: set[str] = set()
    muted: dict[str, str] = {}
    for r in sorted(rows, key=lambda r: (r.ts, r.sent_ts)):
        if r.alert_id not in ids:
            continue
        if r.outcome == "muted":
            muted[r.alert_id] = r.muted_by
        elif r.outcome in TOLD and r.state == "firing":
            told.add(r.alert_id)
    under = {i: m.removeprefix("inhibited:") for i, m in muted.items()
             if i not in told and m.startswith("inhibited:")}
    if not under or recorded is None:
        return {}
    try:
        covers = list(recorded(sorted(set(under.values()))))
    except Exception as exc:  # noqa: BLE001 - a store hiccup must not stop the takeover
        log.warning("could not read the record of notifications (%s): node alerts held as "
                    "their rack came back are sent now", exc)
        return {}
    resolved: dict[str, float] = {}
    for r in covers:
        if r.rule == RACK_DOWN_RULE and r.state == "resolved":
            resolved[r.alert_id] = min(r.ts, resolved.get(r.alert_id, r.ts))
    return {i: resolved[rack] + hold_s for i, rack in under.items() if rack in resolved}


def resend_undelivered(lanes: Sequence[Lane], firing: list[Notice],
                       rows: list[Notification]) -> None:
    """Send each notifying sink, once, the firing un-muted alerts taken over that the
    store's record shows it never took (given up by the processor before this one, at
    its stop or after ``retry_s``, or still ``queued``: it was killed before an
    outcome): that sink's memory of them ended with that process."""
    if not firing:
        return
    for lane in lanes:
        if not getattr(lane.sink, "notify_only", False):
            continue
        due = undelivered([n.alert.id for n in firing], lane.sink.name, rows)
        if due:
            log.warning("alert sink %s: %d firing alert(s) taken over were never "
                        "delivered there (given up before, or the processor before "
                        "stopped first); sending them now: %s",
                        lane.sink.name, len(due), ", ".join(sorted(due)[:5]))
            lane.put("send", [n for n in firing if n.alert.id in due])


def told_before(alert: Alert, sinks: Sequence[str], rows: Iterable[Notification]) -> bool:
    """Does the record show each of ``sinks`` (the notifying ones) told of firing ``alert``
    as it is (state, severity) and no change of it handed over since? Its latest ``sent``
    there has its state and severity, and no ``queued``, ``given_up`` or ``failed`` came
    after; of the ``muted`` records after, none repeats the muting of the one before it
    (the record holds a change only when its state, revision, severity or muting changed,
    so a repeat is a new revision, which the record does not name: news). What a restarted
    notifier needs to not page again, once its silence ends, what was paged before it."""
    if alert.state != "firing" or not sinks:
        return False
    mine = sorted((r for r in rows if r.alert_id == alert.id),
                  key=lambda r: (r.ts, r.sent_ts))
    for sink in sinks:
        told, muting = False, None
        for r in (r for r in mine if r.sink == sink):
            if r.outcome == "sent":
                told, muting = (r.state, r.severity) == (alert.state, alert.severity), None
            elif r.outcome in TOLD:  # handed again (queued), or not delivered
                told, muting = False, None
            elif r.outcome == "muted":
                changed = muting == (r.state, r.muted_by) or r.severity != alert.severity
                told, muting = told and not changed, (r.state, r.muted_by)
        if not told:
            return False
    return True
