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

The ``AlertBook`` here holds the open alerts across batches and finds the instants
at which each subject was judged; one subject's step at one instant is
``alert_step``, an alert's identity ``alert_keys``.

Inhibition, silences and acknowledgements act on notifications, not on the
lifecycle: see ``fleetwatch.pipeline.silences``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from fleetwatch.frame import Frame
from fleetwatch.models import FORGOTTEN, Finding
from fleetwatch.pipeline.alert_keys import ROOM_DEVICE, Key, alert_key, finding_device
from fleetwatch.pipeline.alert_step import Meta, Pacing, meta_of, other_board, step
from fleetwatch.pipeline.store.base import Alert, gpu_index
from fleetwatch.pipeline.store.lprecords import render_message

# An open alert whose value changed is written again at most this often (frame
# time), so the store shows a current value without a write per batch.
REFRESH_S = 60.0
# An open alert whose repeat count (``REPEATS``: the XIDs an XID alert counts) changed is
# written again at most this often, its first repeat at once: "nothing to do unless it
# repeats" is read from the store (``alerts``, the pages) within seconds, not a minute.
REPEAT_REFRESH_S = 10.0


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
        self._meta: dict[Key, Meta] = {}
        # The state the last ``observe`` computed, taken over by ``apply`` of its changes.
        self._staged: tuple[frozenset[str], dict[Key, Alert], dict[Key, Meta]] | None = None
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
            self._meta[key] = meta_of(a)
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
            self._meta[key] = meta_of(a)

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
        pace = Pacing(self.refresh_s, self.repeat_refresh_s, self.keep_firing_s)
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
                ended = other_board(opened.get(key), finding, ts)
                if ended is not None:  # the slot's board was replaced: a new alert
                    changed[ended.id] = ended
                    opened.pop(key)
                    meta.pop(key, None)
                alert, m = step(key, ts, finding, opened.get(key), meta.get(key), pace)
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
