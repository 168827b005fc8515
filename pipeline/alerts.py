"""The alert lifecycle: findings in, alerts out (pending → firing → resolved).

Pure logic, driven by the frames' own timestamps rather than the wall clock,
so a replay or an accelerated simulation gives the same alerts as real time.
One alert per (rule, cluster, node, device) at a time: repeated findings
update it instead of raising new ones. An alert resolves when its subject is
seen again without the finding; a silent node keeps its alerts open.

``observe`` only computes the changes; the processor writes them to the
store and then ``apply``-s them, so a failed write leaves the book as it was
and the same batch is observed again (no transition, "resolved" included, is
lost). ``load`` and ``drop`` follow the nodes a processor owns across
rebalances.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence

from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.pipeline.store.base import Alert, gpu_device

Key = tuple[str, str, str, str]  # (rule, cluster, node, device)
Subject = tuple[str, str, str]   # (cluster, node, device)


def _device(finding: Finding) -> str:
    return "host" if finding.gpu is None else gpu_device(finding.gpu)


def _key(a: Alert) -> Key:
    return (a.rule, a.cluster, a.node, a.device)


class AlertBook:
    def __init__(self, active: Iterable[Alert] = ()) -> None:
        # Alerts still open (pending or firing), e.g. reloaded from the store at start.
        self._open: dict[Key, Alert] = {}
        self.load(active)

    @property
    def open(self) -> list[Alert]:
        return list(self._open.values())

    def observe(self, frames: Sequence[Frame], findings: Sequence[Finding]) -> list[Alert]:
        """The alerts this batch changes, in the order they changed; the book is unchanged."""
        seen: dict[Subject, set[float]] = defaultdict(set)
        for f in frames:
            seen[(f.cluster, f.node, "host")].add(f.ts)
            for g in f.gpus:
                seen[(f.cluster, f.node, gpu_device(g.index))].add(f.ts)
        hits: dict[Key, dict[float, Finding]] = defaultdict(dict)
        for finding in findings:
            key = (finding.rule, finding.cluster, finding.node, _device(finding))
            hits[key][finding.ts] = finding
            seen[key[1:]].add(finding.ts)
        book = dict(self._open)  # stepped on a copy: apply() makes it so once stored
        changed: dict[str, Alert] = {}
        for key in set(hits) | set(book):
            for ts in sorted(seen.get(key[1:], ())):
                alert = self._step(book, key, ts, hits[key].get(ts) if key in hits else None)
                if alert is not None:
                    changed[alert.id] = alert
        return list(changed.values())

    def apply(self, changes: Iterable[Alert]) -> None:
        """Make ``changes`` (from ``observe``, once the store has them) the book's state."""
        for a in changes:
            key = _key(a)
            if a.state != "resolved":
                self._open[key] = a
            elif key in self._open and self._open[key].id == a.id:
                del self._open[key]

    def load(self, alerts: Iterable[Alert]) -> None:
        """Take over open alerts (read from the store) unless the book has one of that identity."""
        for a in alerts:
            if a.state != "resolved":
                self._open.setdefault(_key(a), a)

    def drop(self, nodes: Collection[str]) -> None:
        """Forget the alerts of these nodes (their partitions went to another processor)."""
        if nodes:
            self._open = {k: a for k, a in self._open.items() if a.node not in nodes}

    @staticmethod
    def _step(book: dict[Key, Alert], key: Key, ts: float,
              finding: Finding | None) -> Alert | None:
        alert = book.get(key)
        if finding is None:
            if alert is None:
                return None
            del book[key]
            return dataclasses.replace(alert, state="resolved", updated_ts=ts,
                                       resolved_ts=ts)
        if alert is None:
            alert = Alert(
                id=f"{key[0]}/{key[2]}/{key[3]}/{int(ts * 1000)}", rule=finding.rule,
                severity=finding.severity, cluster=finding.cluster, rack=finding.rack,
                node=finding.node, device=key[3], state="pending", started_ts=ts,
                updated_ts=ts, value=finding.value, message=finding.message)
        else:
            alert = dataclasses.replace(alert, updated_ts=ts, value=finding.value,
                                        message=finding.message)
        if alert.state == "pending" and ts - alert.started_ts >= finding.for_s:
            alert = dataclasses.replace(alert, state="firing", fired_ts=ts)
        book[key] = alert
        return alert
