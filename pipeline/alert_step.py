"""One alert's step at one instant of the lifecycle (``pipeline.alerts``).

Given a subject's open alert (or none), what the lifecycle knows of it beyond the alert
(``Meta``) and the finding at one instant (or none, where the detector judged the subject
and found nothing): the alert that instant makes (new, firing, a new value, resolved) and
its meta. Pure: the ``AlertBook`` holds the state and decides what to write.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from fleetwatch.models import KEEP_FIRING, RANK, REPEATS, Finding
from fleetwatch.pipeline.alert_keys import Key, revision
from fleetwatch.pipeline.store.base import Alert


@dataclass(frozen=True, slots=True)
class Pacing:
    """How often an open alert is written again, and how long a firing one is kept firing
    once its subject is judged clear (the ``AlertBook``'s settings)."""

    refresh_s: float
    repeat_refresh_s: float
    keep_firing_s: float


@dataclass(frozen=True, slots=True)
class Meta:
    """What the lifecycle needs beyond the ``Alert``: when the finding was last seen,
    how long it is held after that, and when the alert was last written."""

    last_seen: float
    hold_s: float
    written: float
    clear_since: float | None = None  # a firing alert judged clear since then
    # The revision last written, and when one that changed it was (see ``revised``).
    revision: float | None = None
    revised: float = float("-inf")
    repeats: float | None = None  # the repeat count (``REPEATS``) last written


def meta_of(a: Alert, hold: float | None = None) -> Meta:
    """The meta of an alert as stored (loaded, or a change applied)."""
    if hold is None:
        hold = float(a.evidence.get("hold_s", 0.0)) if a.evidence else 0.0
    return Meta(a.updated_ts, hold, a.updated_ts, revision=revision(a), repeats=_repeats(a))


def _rank(a: Alert) -> float:
    return a.evidence.get(RANK, 0.0) if a.evidence else 0.0


def _repeats(a: Alert) -> float | None:
    return a.evidence.get(REPEATS) if a.evidence else None


def step(key: Key, ts: float, finding: Finding | None, alert: Alert | None,
         meta: Meta | None, pace: Pacing) -> tuple[Alert | None, Meta | None]:
    if alert is not None and ts <= alert.updated_ts:
        # A late frame (the alert has moved past it), or an instant already judged (a
        # frame delivered twice, or a stream clock that stands still): nothing new.
        return None, None
    if finding is None:
        if alert is None:
            return None, None
        if meta is not None and ts < meta.last_seen + meta.hold_s:
            # A latched event still counts as holding. An update not yet written (a
            # repeated XID within refresh_s) is written now that refresh_s has passed:
            # no later finding may come to carry it before the alert resolves.
            if meta.written < alert.updated_ts and (ts - meta.written >= pace.refresh_s
                                                    or _repeated(meta, alert, ts, pace)):
                return alert, _wrote(meta, alert, ts)
            return None, None
        if alert.state == "resolved":
            return None, None
        keep = (alert.evidence or {}).get(KEEP_FIRING, pace.keep_firing_s)
        if alert.state == "firing" and keep > 0 and meta is not None:
            since = ts if meta.clear_since is None else meta.clear_since
            if ts - since < keep:
                return None, dataclasses.replace(meta, clear_since=since)
        return dataclasses.replace(alert, state="resolved", updated_ts=ts,
                                   resolved_ts=ts), None
    if finding.resolves:  # its detector forgot the subject: nothing stays open for ever
        if alert is None or alert.state == "resolved":
            return None, None
        return dataclasses.replace(
            alert, state="resolved", updated_ts=ts, resolved_ts=ts, value=finding.value,
            evidence={**(alert.evidence or {}), **finding.evidence},
            resolution=". ".join(t.rstrip(".") for t in (finding.message, finding.action)
                                 if t)), None
    evidence = dict(finding.evidence) if finding.evidence else {}
    if finding.hold_s > 0:
        evidence["hold_s"] = finding.hold_s
    opened = alert is None
    if alert is None:
        rule, cluster, node, device = key
        alert = Alert(
            id=f"{rule}/{cluster}/{node}/{device}/{int(ts * 1000)}", rule=rule,
            severity=finding.severity, cluster=cluster, rack=finding.rack, node=node,
            device=device, state="pending", started_ts=_began(finding, ts), updated_ts=ts,
            value=finding.value, message=finding.message, evidence=evidence,
            action=finding.action, jobs=finding.jobs, uuid=finding.board,
            users=finding.users, teams=finding.teams)
        m = Meta(ts, finding.hold_s, ts, revision=revision(alert), revised=ts,
                 repeats=_repeats(alert))
    elif finding.ends:  # how it ended: the firing message and action stay
        alert = dataclasses.replace(
            alert, updated_ts=ts, value=finding.value, evidence=evidence or alert.evidence,
            resolution=". ".join(t.rstrip(".") for t in (finding.message, finding.action)
                                 if t))
        m = meta if meta is not None else Meta(ts, 0.0, alert.started_ts)
        m = _wrote(dataclasses.replace(m, last_seen=ts, hold_s=finding.hold_s,
                                       clear_since=None), alert, ts)
    else:
        rank = _rank(alert)
        alert = dataclasses.replace(
            alert, updated_ts=ts, value=finding.value, message=finding.message,
            severity=finding.severity, evidence=evidence or alert.evidence,
            action=finding.action or alert.action, jobs=finding.jobs or alert.jobs,
            users=finding.users or alert.users)
        m = meta if meta is not None else Meta(ts, 0.0, alert.started_ts)
        m = dataclasses.replace(m, last_seen=ts, hold_s=finding.hold_s, clear_since=None)
        if (_revised(m, alert, ts, pace) or _rank(alert) > rank
                or _repeated(m, alert, ts, pace) or ts - m.written >= pace.refresh_s):
            m = _wrote(m, alert, ts)
    if alert.state == "pending" and ts - alert.started_ts >= finding.for_s:
        # An alert that opens already past its for_s, of a condition that would have
        # fired then (``Finding.fired_since``: a node silent since before a takeover),
        # fired as a processor watching then would have said, not at its detection.
        fired = alert.started_ts + finding.for_s if opened and finding.fired_since else ts
        alert = dataclasses.replace(alert, state="firing", fired_ts=min(fired, ts),
                                    fired_message=alert.message)
        m = _wrote(m, alert, ts)
    return alert, m


def _revised(m: Meta, alert: Alert, ts: float, pace: Pacing) -> bool:
    """Is the alert's revision news to write now: changed since last written (not from
    none, as an adopted alert of an older release takes its first), and no changed
    revision written for ``refresh_s``?"""
    now = revision(alert)
    return (m.revision is not None and now is not None and now != m.revision
            and ts - m.revised >= pace.refresh_s)


def _repeated(m: Meta, alert: Alert, ts: float, pace: Pacing) -> bool:
    """Is the alert's repeat count (``REPEATS``) news to write now, its revision the one
    written (a new revision waits for ``_revised``: a write would notify it): its first
    repeat, or changed and nothing written for ``repeat_refresh_s``? What the on-call
    acts on ("unless it repeats"), kept current without a write per frame."""
    now = _repeats(alert)
    if now is None or now == m.repeats or revision(alert) != m.revision:
        return False
    return (m.repeats or 0.0) < 2.0 <= now or ts - m.written >= pace.repeat_refresh_s


def other_board(alert: Alert | None, finding: Finding | None, ts: float) -> Alert | None:
    """The open alert, resolved at ``ts``, where the finding is about another board than
    the one it names (its slot's board was replaced): it stays about the old board, and
    the new board's finding opens an alert of its own. None where it goes on."""
    if (alert is None or finding is None or not finding.board or not alert.uuid
            or alert.uuid == finding.board or ts <= alert.updated_ts):
        return None
    return dataclasses.replace(alert, state="resolved", updated_ts=ts, resolved_ts=ts)


def _began(finding: Finding, ts: float) -> float:
    """When a new alert started: where its detector says the condition began before this
    first finding (``Finding.since``), then."""
    since = finding.since
    return min(ts, since) if since is not None and math.isfinite(since) else ts


def _wrote(m: Meta, alert: Alert, ts: float) -> Meta:
    """The meta once ``alert`` is written at ``ts``."""
    now = revision(alert)
    revised = ts if now != m.revision else m.revised
    return dataclasses.replace(m, written=ts, revision=now, revised=revised,
                               repeats=_repeats(alert))
