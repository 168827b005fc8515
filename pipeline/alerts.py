"""The alert lifecycle: findings in, alerts out (pending → firing → resolved).

Pure logic, driven by the frames' own timestamps rather than the wall clock,
so a replay or an accelerated simulation gives the same alerts as real time.
One alert per (rule, node, device) at a time: repeated findings update it
instead of raising new ones. An alert resolves when its subject is seen again
without the finding; a silent node keeps its alerts open.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence

from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.pipeline.store.base import Alert, gpu_device

Key = tuple[str, str, str]  # (rule, node, device)


def _device(finding: Finding) -> str:
    return "host" if finding.gpu is None else gpu_device(finding.gpu)


class AlertBook:
    def __init__(self, active: Iterable[Alert] = ()) -> None:
        # Alerts still open (pending or firing), e.g. reloaded from the store at start.
        self._open: dict[Key, Alert] = {(a.rule, a.node, a.device): a for a in active
                                        if a.state != "resolved"}

    @property
    def open(self) -> list[Alert]:
        return list(self._open.values())

    def observe(self, frames: Sequence[Frame], findings: Sequence[Finding]) -> list[Alert]:
        """Advance every alert through the batch; return the alerts that changed."""
        seen: dict[tuple[str, str], set[float]] = defaultdict(set)
        for f in frames:
            seen[(f.node, "host")].add(f.ts)
            for g in f.gpus:
                seen[(f.node, gpu_device(g.index))].add(f.ts)
        hits: dict[Key, dict[float, Finding]] = defaultdict(dict)
        for finding in findings:
            key = (finding.rule, finding.node, _device(finding))
            hits[key][finding.ts] = finding
            seen[(finding.node, key[2])].add(finding.ts)
        changed: dict[str, Alert] = {}
        for key in set(hits) | set(self._open):
            for ts in sorted(seen.get((key[1], key[2]), ())):
                alert = self._step(key, ts, hits[key].get(ts) if key in hits else None)
                if alert is not None:
                    changed[alert.id] = alert
        return list(changed.values())

    def _step(self, key: Key, ts: float, finding: Finding | None) -> Alert | None:
        alert = self._open.get(key)
        if finding is None:
            if alert is None:
                return None
            del self._open[key]
            return dataclasses.replace(alert, state="resolved", updated_ts=ts,
                                       resolved_ts=ts)
        if alert is None:
            alert = Alert(
                id=f"{key[0]}/{key[1]}/{key[2]}/{int(ts * 1000)}", rule=finding.rule,
                severity=finding.severity, cluster=finding.cluster, rack=finding.rack,
                node=finding.node, device=key[2], state="pending", started_ts=ts,
                updated_ts=ts, value=finding.value, message=finding.message)
        else:
            alert = dataclasses.replace(alert, updated_ts=ts, value=finding.value,
                                        message=finding.message)
        if alert.state == "pending" and ts - alert.started_ts >= finding.for_s:
            alert = dataclasses.replace(alert, state="firing", fired_ts=ts)
        self._open[key] = alert
        return alert
