"""The alert lifecycle: findings in, alerts out (pending → firing → resolved).

Pure logic, driven by the frames' own timestamps rather than the wall clock,
so a replay or an accelerated simulation gives the same alerts as real time.

* Identity: one alert per (rule, cluster, node, device) at a time; repeated
  findings update it (dedup) instead of raising new ones. The device is
  ``gpuN`` for a GPU finding, ``host`` for a node finding and ``rack:NAME``
  for a rack finding (whose node is "").
* For-durations: an alert is pending until its finding has held for the
  finding's ``for_s``, then firing.
* Hold times: a latched event (an XID, an ECC jump) counts as holding for
  ``hold_s`` after its last sighting, so one event is one alert.
* Resolution: only on a frame in which the detector could judge the subject
  (``requirements``: rule -> metrics the rule needs, the detectors' ``rules``)
  and found nothing. A silent node, a lost GPU, or a frame without the metric
  keeps the alert open: a detector that did not evaluate a GPU is not saying OK. Only
  a finding that says its detector forgot the subject (``Finding.resolves``: a node not
  heard of for a week) resolves it without a frame, its message the ``resolution``; one
  that says the node or rack is forgotten (``FORGOTTEN``) resolves every open alert of it.
  A pending alert that clears resolves at once. A firing one resolves once its
  subject has been judged clear for ``keep_firing_s`` (Prometheus's
  ``keep_firing_for``): a GPU hovering at a limit, or sampled every few minutes
  across it, is one alert that stays firing, not a page each time it crosses. A
  finding whose evidence carries ``keep_firing_s`` (``KEEP_FIRING``) sets its own (a
  lost GPU that answers again is back: 0, resolved at once).
* Boards: a finding that names its GPU board (``Finding.board``: an XID) while the
  open alert names another (the slot's board was replaced) resolves that alert, which
  stays about the old board, and opens a new one about the new board.
* Revisions: a finding whose evidence carries ``revision`` (``REVISION``) asks
  for its open alert to be written again, and the notifier forwards the change: the
  sinks hear that the alert got worse (another XID code joined an XID alert). It is
  written at once when its ``rank`` (``RANK``: how drastic the action is) rose or when
  no revision was written for ``refresh_s``; else with the next write, at most
  ``refresh_s`` later: a GPU reporting a new code every second is one notification per
  ``refresh_s``, a worse action one at once. An alert adopted without a revision (one
  of an older release) taking its first is no news. A repeat count (``REPEATS``) that
  changed is written (not notified) at its first repeat at once, else at most every
  ``REPEAT_REFRESH_S``: the store says whether an XID repeats within seconds.
* Transactions: ``observe`` computes the changes and leaves the book as it was;
  the caller stores them and only then calls ``apply``. A failed write leaves
  the book unchanged and the same batch can be observed again: no transition
  is lost.

Inhibition, silences and acknowledgements act on notifications, not on the
lifecycle: see ``fleetwatch.pipeline.silences``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleetwatch.frame import Frame
from fleetwatch.models import FORGOTTEN, KEEP_FIRING, RANK, REPEATS, REVISION, Finding
from fleetwatch.models.room import ROOM
from fleetwatch.pipeline.store.base import Alert, gpu_device, gpu_index
from fleetwatch.pipeline.store.lprecords import render_message

Key = tuple[str, str, str, str]  # (rule, cluster, node, device)
Subject = tuple[str, str, str]   # (cluster, node, device)

# An open alert whose value changed is written again at most this often (frame
# time), so the store shows a current value without a write per batch.
REFRESH_S = 60.0
# An open alert whose repeat count (``REPEATS``: the XIDs an XID alert counts) changed is
# written again at most this often, its first repeat at once: "nothing to do unless it
# repeats" is read from the store (``alerts``, the pages) within seconds, not a minute.
REPEAT_REFRESH_S = 10.0


def revision(alert: Alert) -> float | None:
    """The alert's ``REVISION`` evidence, None when its detector keeps none."""
    return alert.evidence.get(REVISION) if alert.evidence else None


def finding_device(finding: Finding) -> str:
    """The device part of a finding's alert identity."""
    if finding.scope == "rack":
        return f"rack:{finding.rack}"
    if finding.scope == "node" or finding.gpu is None:
        return "host"
    return gpu_device(finding.gpu)


def alert_key(alert: Alert) -> Key:
    return (alert.rule, alert.cluster, alert.node, alert.device)


# A finding about a cluster's whole room (``models.room``): a rack alert whose rack is
# every rack of its cluster.
ROOM_DEVICE = f"rack:{ROOM}"


def scope_of(alert: Alert) -> str:
    if alert.device.startswith("rack:"):
        return "rack"
    return "node" if alert.device == "host" else "gpu"


@dataclass(frozen=True, slots=True)
class _Meta:
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


def _meta_of(a: Alert, hold: float | None = None) -> _Meta:
    """The meta of an alert as stored (loaded, or a change applied)."""
    if hold is None:
        hold = float(a.evidence.get("hold_s", 0.0)) if a.evidence else 0.0
    return _Meta(a.updated_ts, hold, a.updated_ts, revision=revision(a), repeats=_repeats(a))


def _rank(a: Alert) -> float:
    return a.evidence.get(RANK, 0.0) if a.evidence else 0.0


def _repeats(a: Alert) -> float | None:
    return a.evidence.get(REPEATS) if a.evidence else None


class AlertBook:
    def __init__(self, active: Iterable[Alert] = (),
                 requirements: Mapping[str, Sequence[str]] | None = None,
                 refresh_s: float = REFRESH_S, keep_firing_s: float = 0.0,
                 name: Callable[[Alert, Frame | None], Alert] | None = None) -> None:
        if not keep_firing_s >= 0:  # NaN fails too
            raise ValueError(f"keep_firing_s {keep_firing_s!r}: must be 0 or more seconds")
        self.keep_firing_s = keep_firing_s
        # rule -> metrics it needs to judge a subject; rules not named here are
        # judged whenever their subject's device is in a frame.
        self.requirements = {r: tuple(m) for r, m in (requirements or {}).items()}
        self.refresh_s = refresh_s
        self.repeat_refresh_s = min(REPEAT_REFRESH_S, refresh_s)
        # Fills in what the frames know of an alert's subject (the GPU board: the processor's
        # ``_name_board``); given each alert a step makes and the frame of that step.
        self.name = name
        self._open: dict[Key, Alert] = {}
        self._meta: dict[Key, _Meta] = {}
        # The state the last ``observe`` computed, taken over by ``apply`` of its changes.
        self._staged: tuple[frozenset[str], dict[Key, Alert], dict[Key, _Meta]] | None = None
        # Open alerts loaded beside a newer one of the same key (a store an older release
        # left with a duplicate): resolved by the next ``observe``, once applied.
        self._superseded: dict[str, Alert] = {}
        self.load(active)

    # -- state kept across batches ---------------------------------------
    @property
    def open(self) -> list[Alert]:
        return list(self._open.values())

    def clearing(self) -> frozenset[str]:
        """The ids of the firing alerts whose subject was judged clear since (held firing
        for ``keep_firing_s``, to damp flapping): a notifier does not page one of them as
        firing when its silence ends."""
        return frozenset(a.id for k, a in self._open.items() if a.state == "firing"
                         and k in self._meta and self._meta[k].clear_since is not None)

    def load(self, alerts: Iterable[Alert], now: float | None = None) -> None:
        """Take over open alerts (at start, or for partitions this member now owns).

        ``now``: the processor's clock. An alert updated after it was stamped by a wrong
        clock (an older processor took "now" from agents 2 h ahead): it is taken as
        updated ``now``, or no frame before then could ever change it."""
        for a in alerts:
            if a.state == "resolved":
                continue
            if now is not None and a.updated_ts > now:
                a = dataclasses.replace(a, updated_ts=now)
            key = alert_key(a)
            held = self._open.get(key)
            if held is not None and held.id != a.id:
                # Two open alerts of one subject: the newer goes on, the older (no
                # processor judged it since the newer opened) is resolved.
                older, a = sorted((held, a), key=lambda x: (x.started_ts, x.id))
                self._superseded[older.id] = older
            self._open[key] = a
            self._meta[key] = _meta_of(a)
            if a.message == render_message(a):
                # Its store keeps no text (VictoriaMetrics): its detector's next finding
                # describes it again, written (and re-sent) at once, not refresh_s later.
                self._meta[key] = dataclasses.replace(self._meta[key], written=-math.inf)

    def drop(self, nodes: Iterable[str]) -> None:
        """Forget the alerts of these nodes (their partitions went to another member)."""
        gone = set(nodes)
        for key in [k for k in self._open if k[2] in gone]:
            del self._open[key]
            self._meta.pop(key, None)

    def forget(self, alerts: Iterable[Alert]) -> None:
        """Forget these open alerts (another member judges their subject now)."""
        for a in alerts:
            key = alert_key(a)
            held = self._open.get(key)
            if held is not None and held.id == a.id:
                del self._open[key]
                self._meta.pop(key, None)

    def apply(self, changes: Iterable[Alert]) -> None:
        """Make changes returned by ``observe`` (and now stored) the book's state."""
        changes = list(changes)
        for a in changes:
            if a.state == "resolved":
                self._superseded.pop(a.id, None)
        staged, self._staged = self._staged, None
        if staged is not None and staged[0] == frozenset(a.id for a in changes):
            self._open, self._meta = staged[1], staged[2]
            return
        for a in changes:
            key = alert_key(a)
            if a.state == "resolved":
                current = self._open.get(key)
                if current is not None and current.id == a.id:
                    del self._open[key]
                    self._meta.pop(key, None)
                continue
            self._open[key] = a
            self._meta[key] = _meta_of(a)

    def unwritten(self) -> list[Alert]:
        """Open alerts updated since last written (a repeated XID counted within
        ``refresh_s``): what to write when the data end or the processor stops, as no
        later frame will. Pass them to ``apply`` once stored."""
        return [a for k, a in self._open.items()
                if k in self._meta and self._meta[k].written < a.updated_ts]

    def transitions(self, changes: Iterable[Alert]) -> int:
        """How many of ``changes`` (before ``apply``) move an alert to another state:
        opened (pending, or firing at once), fired, resolved. The rest re-write an open
        alert's current value (at most every ``refresh_s``)."""
        by_id = {a.id: a.state for a in self._open.values()}
        return sum(by_id.get(a.id) != a.state for a in changes)

    # -- one batch ---------------------------------------------------------
    def observe(self, frames: Sequence[Frame], findings: Sequence[Finding]) -> list[Alert]:
        """The alert changes this batch makes, in time order; the book is not changed.

        A change is a new alert, a state change, or (at most every ``refresh_s``)
        a new value of an open alert. Pass the result to ``apply`` once stored.
        """
        by_node: dict[tuple[str, str], dict[float, Frame]] = defaultdict(dict)
        racks: dict[tuple[str, str], set[float]] = defaultdict(set)
        for f in frames:
            by_node[(f.cluster, f.node)][f.ts] = f
            racks[(f.cluster, f.rack)].add(f.ts)
        hits: dict[Key, dict[float, Finding]] = defaultdict(dict)
        for finding in findings:
            key = (finding.rule, finding.cluster, finding.node, finding_device(finding))
            hits[key][finding.ts] = finding
            if finding.resolves and finding.evidence.get(FORGOTTEN):
                for other in self._of_subject(finding):
                    hits[other].setdefault(finding.ts, finding)
        opened = dict(self._open)
        meta = dict(self._meta)
        changed: dict[str, Alert] = {}
        if self._superseded and frames:
            first = min(f.ts for f in frames)
            for old in self._superseded.values():
                at = max(first, old.updated_ts)
                changed[old.id] = dataclasses.replace(old, state="resolved", updated_ts=at,
                                                      resolved_ts=at)
        for key in set(hits) | set(opened):
            found = hits.get(key, {})
            times = set(found)
            rule, cluster, node, device = key
            if device == ROOM_DEVICE:  # the whole room: every rack of its cluster
                times |= {t for (c, _), ts in racks.items() if c == cluster for t in ts}
            elif device.startswith("rack:"):
                times |= racks.get((cluster, device[5:]), set())
            else:
                times |= by_node.get((cluster, node), {}).keys()
            for ts in sorted(times):
                finding = found.get(ts)
                if finding is None and not self._judged(key, ts, by_node, frames):
                    continue
                ended = _other_board(opened.get(key), finding, ts)
                if ended is not None:  # the slot's board was replaced: a new alert
                    changed[ended.id] = ended
                    opened.pop(key)
                    meta.pop(key, None)
                alert, m = self._step(key, ts, finding, opened.get(key), meta.get(key))
                if alert is not None and alert.state == "resolved" and alert.resolved_ts == ts:
                    alert = self._last_values(alert, by_node.get((cluster, node), {}).get(ts))
                if alert is not None and self.name is not None:
                    alert = self.name(alert, by_node.get((cluster, node), {}).get(ts))
                if alert is None:
                    if m is not None:  # still firing, but clear since m.clear_since
                        meta[key] = m
                    continue
                if alert.state == "resolved":
                    opened.pop(key, None)
                    meta.pop(key, None)
                else:
                    opened[key] = alert
                    meta[key] = m
                # Written when new, on a state change, every refresh_s, and (once
                # written in this batch) in its latest form.
                if (alert.state == "resolved" or alert.id in changed
                        or (m is not None and m.written == ts)):
                    changed[alert.id] = alert
        self._staged = (frozenset(changed), opened, meta)
        # At one time, an alert that ended before one that opened about its subject.
        return sorted(changed.values(),
                      key=lambda a: (a.updated_ts, a.state != "resolved", a.id))

    def _of_subject(self, finding: Finding) -> list[Key]:
        """The open alerts of a forgotten subject (``FORGOTTEN``): every one of its node,
        whatever its rule or device, or every rack alert of its rack."""
        if finding.scope == "rack":
            device = finding_device(finding)
            return [k for k in self._open if k[1] == finding.cluster and k[3] == device]
        return [k for k in self._open
                if k[1] == finding.cluster and k[2] == finding.node and finding.node]

    def _last_values(self, alert: Alert, frame: Frame | None) -> Alert:
        """A resolved alert with the readings that resolved it (``resolved_<metric>`` in
        its evidence, of the metrics its rule needs): its notification says what the
        subject reads now, not the firing text alone."""
        index = gpu_index(alert.device)
        if frame is None or index is None:
            return alert
        g = frame.gpu(index)
        now = {f"resolved_{m}": float(g.metrics[m])
               for m in self.requirements.get(alert.rule) or ()
               if g is not None and m in g.metrics and m != "gpu_throttle_reasons"}
        return dataclasses.replace(alert, evidence={**alert.evidence, **now}) if now else alert

    def _judged(self, key: Key, ts: float, by_node: Mapping[tuple[str, str], Mapping[float, Frame]],
                frames: Sequence[Frame]) -> bool:
        """Could the rule's detector judge this subject at ``ts``?"""
        rule, cluster, node, device = key
        needs = self.requirements.get(rule)
        if device.startswith("rack:"):
            rack = device[5:]
            return any(f.ts == ts and f.cluster == cluster and (f.rack == rack or rack == "*")
                       and _has(f, None, needs or ()) for f in frames)
        frame = by_node.get((cluster, node), {}).get(ts)
        if frame is None:
            return False
        index = gpu_index(device)
        if needs is None:  # a rule nobody declared: its device present will do
            return index is None or frame.gpu(index) is not None
        return _has(frame, index, needs)

    def _step(self, key: Key, ts: float, finding: Finding | None, alert: Alert | None,
              meta: _Meta | None) -> tuple[Alert | None, _Meta | None]:
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
                if meta.written < alert.updated_ts and (ts - meta.written >= self.refresh_s
                                                        or self._repeated(meta, alert, ts)):
                    return alert, _wrote(meta, alert, ts)
                return None, None
            if alert.state == "resolved":
                return None, None
            keep = (alert.evidence or {}).get(KEEP_FIRING, self.keep_firing_s)
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
            m = _Meta(ts, finding.hold_s, ts, revision=revision(alert), revised=ts,
                      repeats=_repeats(alert))
        elif finding.ends:  # how it ended: the firing message and action stay
            alert = dataclasses.replace(
                alert, updated_ts=ts, value=finding.value, evidence=evidence or alert.evidence,
                resolution=". ".join(t.rstrip(".") for t in (finding.message, finding.action)
                                     if t))
            m = meta if meta is not None else _Meta(ts, 0.0, alert.started_ts)
            m = _wrote(dataclasses.replace(m, last_seen=ts, hold_s=finding.hold_s,
                                           clear_since=None), alert, ts)
        else:
            rank = _rank(alert)
            alert = dataclasses.replace(
                alert, updated_ts=ts, value=finding.value, message=finding.message,
                severity=finding.severity, evidence=evidence or alert.evidence,
                action=finding.action or alert.action, jobs=finding.jobs or alert.jobs,
                users=finding.users or alert.users)
            m = meta if meta is not None else _Meta(ts, 0.0, alert.started_ts)
            m = dataclasses.replace(m, last_seen=ts, hold_s=finding.hold_s, clear_since=None)
            if (self._revised(m, alert, ts) or _rank(alert) > rank
                    or self._repeated(m, alert, ts) or ts - m.written >= self.refresh_s):
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

    def _revised(self, m: _Meta, alert: Alert, ts: float) -> bool:
        """Is the alert's revision news to write now: changed since last written (not from
        none, as an adopted alert of an older release takes its first), and no changed
        revision written for ``refresh_s``?"""
        now = revision(alert)
        return (m.revision is not None and now is not None and now != m.revision
                and ts - m.revised >= self.refresh_s)


    def _repeated(self, m: _Meta, alert: Alert, ts: float) -> bool:
        """Is the alert's repeat count (``REPEATS``) news to write now, its revision the one
        written (a new revision waits for ``_revised``: a write would notify it): its first
        repeat, or changed and nothing written for ``repeat_refresh_s``? What the on-call
        acts on ("unless it repeats"), kept current without a write per frame."""
        now = _repeats(alert)
        if now is None or now == m.repeats or revision(alert) != m.revision:
            return False
        return (m.repeats or 0.0) < 2.0 <= now or ts - m.written >= self.repeat_refresh_s


def _other_board(alert: Alert | None, finding: Finding | None, ts: float) -> Alert | None:
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


def _wrote(m: _Meta, alert: Alert, ts: float) -> _Meta:
    """The meta once ``alert`` is written at ``ts``."""
    now = revision(alert)
    revised = ts if now != m.revision else m.revised
    return dataclasses.replace(m, written=ts, revision=now, revised=revised,
                               repeats=_repeats(alert))

def _has(frame: Frame, index: int | None, needs: Sequence[str]) -> bool:
    """Does the frame carry every needed metric for this GPU (or, for a node or rack, for
    the host or at least one GPU)?"""
    if index is not None:
        g = frame.gpu(index)
        if g is None or g.state != "ok":
            return False
        return all(m in g.metrics for m in needs)
    for m in needs:
        if m not in frame.host.metrics and not any(m in g.metrics for g in frame.gpus):
            return False
    return True


RULES_SHOWN = 3  # per subject in ``summary``; the rest are counted


def summary(alerts: Iterable[Alert], subjects: int = 2) -> str:
    """Firing alerts in a few words for a terminal line, worst first, by subject:
    ``node-001 gpu3: gpu_temp_critical, gpu_hot_vs_peers, gpu_hw_slowdown +2;
    node-004 host: node_silent; +3 more``. Empty when nothing fires."""
    rank = {"critical": 0, "warning": 1, "info": 2}
    by_subject: dict[tuple[str, str], list[Alert]] = defaultdict(list)
    for a in alerts:
        if a.state == "firing":
            by_subject[(a.node or a.device.removeprefix("rack:"), a.device)].append(a)

    def worst(item: tuple[tuple[str, str], list[Alert]]) -> tuple[int, float, tuple[str, str]]:
        subject, group = item
        return (min(rank.get(a.severity, 3) for a in group),
                min(a.fired_ts or a.started_ts for a in group), subject)

    ranked = sorted(by_subject.items(), key=worst)
    parts = []
    for (where, device), group in ranked[:subjects]:
        worst_of: dict[str, int] = {}
        for a in group:
            worst_of[a.rule] = min(worst_of.get(a.rule, 3), rank.get(a.severity, 3))
        rules = sorted(worst_of, key=lambda r: (worst_of[r], r))
        name = f"rack {where}" if device.startswith("rack:") else f"{where} {device}"
        more = f" +{len(rules) - RULES_SHOWN}" if len(rules) > RULES_SHOWN else ""
        parts.append(f"{name}: {', '.join(rules[:RULES_SHOWN])}{more}")
    rest = sum(len(g) for _, g in ranked[subjects:])
    if rest:
        parts.append(f"+{rest} more")
    return "; ".join(parts)
