"""``fleetwatch timeline``: what happened, in one time-ordered list, for a postmortem.

Pure: the store's records in, entries out. Over a window, optionally of one cluster, rack,
node or job: each alert's transitions (pending, firing, resolved: from the times the alert
keeps; an alert that cleared while pending, never fired, is left out unless asked for, then
"pending cleared", not "resolved": ``pending_cleared``), what was notified at each
notifying sink (sent, or muted and by what: as recorded at the time, ``Notification``),
acknowledgements and silences (who, when, why), the events
of the devices (XIDs, a GPU lost or back, a node silent or back, jobs starting and ending,
a board replaced) and the faults a simulator injected (its ground truth). A run of one
device's same XID (a storm) is one entry with its count and its last time.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import NamedTuple
from zoneinfo import ZoneInfo

from fleetwatch.pipeline.events import jobs_of
from fleetwatch.pipeline.silence_matchers import matches
from fleetwatch.pipeline.silences import visible
from fleetwatch.pipeline.sinks.notified import QUEUED, settled
from fleetwatch.pipeline.store.base import (
    Acknowledgement,
    Alert,
    Annotation,
    Event,
    Notification,
    Silence,
    group_key,
)

# The event kinds a timeline shows (throttle reasons and board identities are the
# node page's: they change every few seconds under load).
EVENT_KINDS = ("xid", "gpu_state", "node_state", "job_start", "job_end", "gpu_replaced",
               "gpu_moved")
# Repeats of one device's same event closer than this are one entry (an XID storm).
RUN_GAP_S = 60.0
# Within one instant: what happened, then what fleetwatch made of it, then who was told.
_ORDER = {"fault": 0, "event": 1, "alert": 2, "notification": 3, "ack": 4, "silence": 5}
CSV_FIELDS = ("time", "ts", "kind", "what", "cluster", "rack", "node", "device", "rule",
              "severity", "alert_id", "by", "count", "detail")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # as report_files: CSV injection


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the timeline. ``what``: the transition (pending, firing, resolved), the
    notification's outcome (sent, muted, not confirmed: handed over, no outcome recorded),
    acknowledged, silence added / silence ended, the event (``xid 79``, ``gpu lost``,
    ``job_start 4000003``) or ``fault``. ``count``: a run of repeats (``last_ts`` the
    last)."""

    ts: float
    kind: str
    what: str
    cluster: str = ""
    rack: str = ""
    node: str = ""
    device: str = ""
    rule: str = ""
    severity: str = ""
    alert_id: str = ""
    by: str = ""
    detail: str = ""
    count: int = 1
    last_ts: float | None = None


class Records(NamedTuple):
    """What the store gave for the window."""

    alerts: Sequence[Alert]
    notifications: Sequence[Notification]
    acks: Sequence[Acknowledgement]
    silences: Sequence[Silence]
    events: Sequence[Event]
    faults: Sequence[Annotation] = ()


@dataclass(frozen=True, slots=True)
class Scope:
    """The window [start, end) and the place asked for ("" : any)."""

    start: float
    end: float
    cluster: str = ""
    rack: str = ""
    node: str = ""
    job: str = ""


def job_scope(scope: Scope, job_events: Sequence[Event]) -> tuple[Scope, set[tuple[str, str]]]:
    """A job's window (its span within ``scope``) and its (node, GPU) slots, from its
    ``job_start``/``job_end`` events; no slot if the job is not in them."""
    spans = [s for s in jobs_of(job_events) if scope.job in s[2].split(",")]
    if not spans:
        return scope, set()
    start = max(scope.start, min(s[3] for s in spans))
    end = min(scope.end, max(scope.end if s[4] is None else s[4] + 1 for s in spans))
    return (Scope(start, end, scope.cluster, scope.rack, scope.node, scope.job),
            {(s[0], s[1]) for s in spans})


def in_place(scope: Scope, cluster: str, rack: str, node: str, device: str = "",
              slots: set[tuple[str, str]] | None = None) -> bool:
    if scope.cluster and cluster != scope.cluster or scope.node and node != scope.node:
        return False
    if scope.rack and rack != scope.rack and rack != f"rack:{scope.rack}":
        return False
    if slots is not None:  # a job's: its GPUs, and its nodes' node-wide findings
        nodes = {n for n, _ in slots}
        return node in nodes and (not device.startswith("gpu") or (node, device) in slots)
    return True


def pending_cleared(alerts: Iterable[Alert]) -> list[Alert]:
    """The alerts that cleared while pending, never fired: no page, no resolution (a GPU
    hovering at a line); ``build`` leaves them out unless asked for."""
    return [a for a in alerts if a.state == "resolved" and a.fired_ts is None]


def build(records: Records, scope: Scope, slots: set[tuple[str, str]] | None = None,
          show_pending_cleared: bool = False) -> list[Entry]:
    """The entries of ``scope``, oldest first. ``slots``: a job's (``job_scope``).
    ``show_pending_cleared``: the alerts that cleared while pending (``pending_cleared``)
    too, as "pending" then "pending cleared"; left out otherwise."""
    def here(cluster: str, rack: str, node: str, device: str = "") -> bool:
        return in_place(scope, cluster, rack, node, device, slots)

    def within(ts: float | None) -> bool:
        return ts is not None and scope.start <= ts < scope.end

    alerts = [a for a in records.alerts if here(a.cluster, a.rack, a.node, a.device)]
    quiet = set() if show_pending_cleared else {a.id for a in pending_cleared(alerts)}
    out = [e for a in alerts if a.id not in quiet for e in _transitions(a) if within(e.ts)]
    out += [_notified(n) for n in settled(records.notifications)
            if within(n.ts) and here(n.cluster, n.rack, n.node, n.device)]
    by_id = {a.id: a for a in records.alerts}
    out += [_acked(k, by_id.get(k.alert_id)) for k in records.acks if within(k.ts)
            and (k.alert_id in by_id and here(*_place(by_id[k.alert_id])) or not _scoped(scope)
                 and k.alert_id not in by_id)]
    out += [e for s in records.silences if not _scoped(scope) or _touches(s, alerts, scope)
            for e in _silence(s) if within(e.ts)]
    out += _events([e for e in records.events if within(e.ts)
                    and here(e.cluster, e.rack, e.node, e.device)])
    # A fault names its node (or its rack, for a rack's), not both: the rack is looked up.
    racks = {(e.cluster, e.node): e.rack for e in records.events}
    racks.update(((a.cluster, a.node), a.rack) for a in records.alerts if a.node)
    out += [_fault(f) for f in records.faults if within(f.start_ts) and (
        here(f.cluster or scope.cluster, racks.get((f.cluster, f.node), ""), f.node, f.device)
        or f.node and f.node == scope.rack and not scope.node and slots is None)]
    return sorted(out, key=lambda e: (e.ts, _ORDER.get(e.kind, 9), e.node, e.device, e.rule))


def _scoped(scope: Scope) -> bool:
    return bool(scope.cluster or scope.rack or scope.node or scope.job)


def _place(a: Alert) -> tuple[str, str, str, str]:
    return a.cluster, a.rack, a.node, a.device


def _transitions(a: Alert) -> list[Entry]:
    def entry(ts: float, what: str, detail: str = "") -> Entry:
        return Entry(ts, "alert", what, a.cluster, a.rack, a.node, a.device, a.rule,
                     a.severity, a.id, detail=detail)

    out = []
    if a.fired_ts is None or a.fired_ts > a.started_ts:
        out.append(entry(a.started_ts, "pending"))
    if a.fired_ts is not None:
        out.append(entry(a.fired_ts, "firing", visible(_fired_message(a))))
    if a.state == "resolved" and a.resolved_ts is not None:
        if a.fired_ts is None:  # it never fired: nothing resolved, nobody was told
            out.append(entry(a.resolved_ts, "pending cleared", visible(a.message)))
        else:
            out.append(entry(a.resolved_ts, "resolved"))
    return out


def _fired_message(a: Alert) -> str:
    """The message ``a`` fired with; an older store's alert (or one whose text the store
    does not keep) has only its latest, said so where it was updated after firing."""
    if a.fired_message:
        return a.fired_message
    if a.fired_ts is not None and a.updated_ts > a.fired_ts and a.message:
        return f"{a.message} (its latest message)"
    return a.message


def _notified(n: Notification) -> Entry:
    detail = f"{n.state} to {n.sink}" + (f", muted by {n.muted_by}" if n.muted_by else "")
    if n.outcome == QUEUED:  # handed over; the processor stopped before an outcome
        detail += ", handed over, no outcome recorded"
    what = "not confirmed" if n.outcome == QUEUED else n.outcome
    return Entry(n.ts, "notification", what, n.cluster, n.rack, n.node, n.device, n.rule,
                 n.severity, n.alert_id, detail=detail)


def _acked(k: Acknowledgement, a: Alert | None) -> Entry:
    place = _place(a) if a is not None else ("", "", "", "")
    return Entry(k.ts, "ack", "acknowledged", *place, rule=a.rule if a else "",
                 severity=a.severity if a else "", alert_id=k.alert_id, by=visible(k.by),
                 detail=visible(k.comment))


def _touches(s: Silence, alerts: Sequence[Alert], scope: Scope) -> bool:
    """A silence of the place asked: it matches one of its alerts, or names it."""
    named = {(label, value) for label, value in (("cluster", scope.cluster),
                                                  ("rack", scope.rack), ("node", scope.node))
             if value}  # a scope's unset part names nothing (a matcher rack="" is no rack)
    return (any(matches(s, a) for a in alerts)
            or any(op == "=" and (label, value) in named for label, op, value in s.matchers))


def _silence(s: Silence) -> list[Entry]:
    """A silence's life: made (with its window, when it starts later than it was made),
    started, ended; one cancelled before its start is made and cancelled, with the window
    it was planned for, no more (it never muted anything). Records of older versions keep
    no making or cancelling time, nor the planned end of one expired."""
    matchers = visible(",".join(f"{n}{op}{v}" for n, op, v in s.matchers))
    detail = matchers + (f": {visible(s.comment)}" if s.comment else "")
    by = visible(s.created_by)
    ran = s.end_ts > s.start_ts
    ahead = s.created_ts and s.start_ts - s.created_ts >= 1.0
    # The end it was made with: expiring it moved end_ts (to its start, if cancelled before
    # it); a record of an older version keeps no planned end.
    planned = max(s.end_ts, s.planned_end_ts)
    span = (f"{_stamp(s.start_ts)} .. {_stamp(planned, s.start_ts)} UTC"
            if planned > s.start_ts else f"{_stamp(s.start_ts)} UTC")
    out: list[Entry] = []
    if ahead:
        window = f"for {span}" if planned > s.start_ts else f"from {span}"
        out.append(Entry(s.created_ts, "silence", "silence made", by=by, alert_id=s.id,
                         detail=f"{window}: {detail}"))
    if not ran:
        if ahead and s.expired_ts:
            # `silence expire` takes no name: who cancelled it is not known (not its maker).
            said = f"planned {span}, never in force" if planned > s.start_ts else ""
            return [*out, Entry(s.expired_ts, "silence", "silence cancelled", alert_id=s.id,
                                detail=matchers + (f": {said}" if said else ""))]
        return [*out, Entry(s.start_ts, "silence", "silence cancelled before its start",
                            by=by, alert_id=s.id, detail=detail)]
    out.append(Entry(s.start_ts, "silence", "silence started" if ahead else "silence added",
                     by=by, alert_id=s.id, detail=matchers if ahead else detail))
    why = " (expired by hand" + (f"; planned until {_stamp(planned, s.end_ts)} UTC"
                                 if planned > s.end_ts else "") + ")" if s.expired_ts else ""
    return [*out, Entry(s.end_ts, "silence", "silence ended", by=by, alert_id=s.id,
                        detail=matchers + why)]


def _stamp(ts: float, same_day_as: float | None = None) -> str:
    """UTC time; the date left out when it is ``same_day_as``'s."""
    day = time.strftime("%Y-%m-%d", time.gmtime(ts))
    clock = time.strftime("%H:%M:%S", time.gmtime(ts))
    if same_day_as is not None and day == time.strftime("%Y-%m-%d", time.gmtime(same_day_as)):
        return clock
    return f"{day} {clock}"


def _event_what(e: Event) -> str:
    if e.kind == "xid":
        return f"xid {e.code}"
    if e.kind in ("gpu_state", "node_state"):
        return f"{e.kind.split('_')[0]} {e.value}"
    return f"{e.kind} {e.value}".strip()


def _events(events: Iterable[Event]) -> list[Entry]:
    """Events as entries: a run of one device's same XID (gaps under ``RUN_GAP_S``) as one
    with its count, a job's start or end on a node's GPUs at one instant as one."""
    out: list[Entry] = []
    last: dict[tuple[object, ...], int] = {}  # group key -> index of its open run in out
    jobs: dict[tuple[object, ...], int] = {}  # a job's instant on a node -> its entry
    for e in sorted(events, key=lambda e: (e.ts, e.device)):
        if e.kind in ("job_start", "job_end"):
            at = (e.cluster, e.node, e.kind, e.value, round(e.ts * 1000))
            i = jobs.get(at)
            if i is not None:
                gpus = out[i].detail.removeprefix("on ").split(", ") + [e.device]
                out[i] = Entry(**{**asdict(out[i]), "device": "", "count": len(gpus),
                                  "detail": "on " + ", ".join(gpus)})
                continue
            jobs[at] = len(out)
            out.append(Entry(e.ts, "event", _event_what(e), e.cluster, e.rack, e.node,
                             e.device, detail=f"on {e.device}"))
            continue
        key = group_key(e)
        i = last.get(key)
        if i is not None and e.kind == "xid" and e.ts - (out[i].last_ts or out[i].ts) < RUN_GAP_S:
            run = out[i]
            out[i] = Entry(**{**asdict(run), "count": run.count + 1, "last_ts": e.ts})
            continue
        last[key] = len(out)
        out.append(Entry(e.ts, "event", _event_what(e), e.cluster, e.rack, e.node, e.device,
                         detail=visible(e.text)))
    return out


def _fault(f: Annotation) -> Entry:
    return Entry(f.start_ts, "fault", f.kind, f.cluster, "", f.node, f.device,
                 detail=visible(f.text), last_ts=f.end_ts)


# -- output -------------------------------------------------------------------
def stamp(ts: float, tz: ZoneInfo) -> str:
    return datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d %H:%M:%S")


def where(e: Entry) -> str:
    return "/".join(p for p in (e.cluster, e.rack, e.node, e.device) if p) or "-"


def text_line(e: Entry, tz: ZoneInfo) -> str:
    """``2026-11-27 16:43:47  alert         firing        sim/rack-01/node-002/gpu4
    gpu_xid_critical critical  ...``"""
    rest = " ".join(p for p in (e.rule, e.severity) if p)
    said = []
    if e.count > 1 and e.last_ts is not None and e.kind != "fault":
        said.append(f"×{e.count} until {stamp(e.last_ts, tz)}")
    elif e.kind == "fault" and e.last_ts is not None:
        said.append(f"until {stamp(e.last_ts, tz)}")
    if e.by:
        said.append(f"by {e.by}")
    if e.detail:
        said.append(e.detail)
    if e.kind in ("ack", "silence", "notification") and e.alert_id:
        said.append(f"[{e.alert_id}]")
    return (f"{stamp(e.ts, tz)}  {e.kind:<12} {e.what:<16} {where(e)}"
            + (f"  {rest}" if rest else "") + (f"  {' · '.join(said)}" if said else ""))


def json_line(e: Entry, tz: ZoneInfo) -> str:
    out = asdict(e)
    out["time"] = datetime.fromtimestamp(e.ts, tz).isoformat()
    if e.last_ts is not None:
        out["last_time"] = datetime.fromtimestamp(e.last_ts, tz).isoformat()
    return json.dumps(out)


def csv_text(entries: Sequence[Entry], tz: ZoneInfo) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for e in entries:
        row: Mapping[str, object] = {**asdict(e),
                                     "time": datetime.fromtimestamp(e.ts, tz).isoformat()}
        w.writerow([_cell(row[f]) for f in CSV_FIELDS])
    return buf.getvalue()


def _cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
