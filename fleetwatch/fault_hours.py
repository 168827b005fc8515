"""GPU-hours spent under fault alerts, by the jobs (and their users) that held those GPUs.

Pure: alerts, the jobs on each GPU (``job_start``/``job_end`` events: ``events.jobs_of``)
and who ran each job (the energy ledger's rows) in; lines out. An alert covers, while it
fires (from ``fired_ts`` to its resolution, or the end of the window), its GPU; a node's
alert (``host``: a silent node, a hung job) every GPU of the node; a rack's every GPU of
the rack's nodes. A job's GPU-hours under a rule are the overlap of the job's time on each
GPU with that rule's firing alerts there; its total (``rule`` "(any)") counts each GPU-second
once, however many alerts covered it (a cooling failure raises several thermal rules).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleetwatch.pipeline.store.base import Alert

ANY = "(any)"
# Severities that count as a fault (an ``info`` finding is not one).
FAULT_SEVERITIES = ("critical", "warning")

Span = tuple[float, float]
# (node, device, job, start, end or None): ``events.jobs_of``
JobSpan = tuple[str, str, str, float, float | None]


@dataclass(frozen=True, slots=True)
class FaultHours:
    """One job's GPU-hours under one rule's firing alerts (``ANY``: under any of them)."""

    job: str
    user: str
    team: str
    rule: str
    gpu_hours: float
    gpus: int            # GPUs of the job that were covered


def _covers(a: Alert, node: str, device: str, rack_of: Mapping[str, str]) -> bool:
    if a.node:
        return a.node == node and (a.device == device or not a.device.startswith("gpu"))
    return bool(a.rack) and rack_of.get(node) == a.rack  # a rack's alert


def _merge(spans: Iterable[Span]) -> list[Span]:
    out: list[Span] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _overlap(spans: Sequence[Span], s: float, e: float) -> float:
    return sum(max(0.0, min(e, b) - max(s, a)) for a, b in spans)


def fault_hours(alerts: Sequence[Alert], jobs: Sequence[JobSpan], owners: Mapping[str, tuple[
        str, str]], rack_of: Mapping[str, str], start: float, end: float) -> list[FaultHours]:
    """Per job and rule (and per job, ``ANY``), the GPU-hours the job's GPUs spent under
    firing fault alerts within [start, end), the most first. ``owners``: job -> (user,
    team); ``rack_of``: node -> rack (for rack alerts)."""
    firing = [(a, max(start, a.fired_ts), min(end, a.resolved_ts or end)) for a in alerts
              if a.fired_ts is not None and a.severity in FAULT_SEVERITIES]
    firing = [(a, s, e) for a, s, e in firing if e > s]
    seconds: dict[tuple[str, str], float] = {}
    gpus: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for node, device, job, j_start, j_end in jobs:
        js, je = max(start, j_start), min(end, end if j_end is None else j_end)
        if je <= js or not device.startswith("gpu"):
            continue
        by_rule: dict[str, list[Span]] = {}
        for a, s, e in firing:
            if _covers(a, node, device, rack_of):
                by_rule.setdefault(a.rule, []).append((s, e))
        every = [span for spans in by_rule.values() for span in spans]
        for rule, spans in [*by_rule.items(), (ANY, every)]:
            t = _overlap(_merge(spans), js, je)
            if t > 0:
                seconds[(job, rule)] = seconds.get((job, rule), 0.0) + t
                gpus.setdefault((job, rule), set()).add((node, device))
    out = [FaultHours(job, *owners.get(job, ("", "")), rule, t / 3600, len(gpus[(job, rule)]))
           for (job, rule), t in seconds.items()]
    return sorted(out, key=lambda f: (f.rule != ANY, -f.gpu_hours, f.job, f.rule))


def by_user(lines: Sequence[FaultHours]) -> list[tuple[str, str, float]]:
    """(user, rule, GPU-hours) summed over the user's jobs, the most first."""
    acc: dict[tuple[str, str], float] = {}
    for f in lines:
        acc[(f.user, f.rule)] = acc.get((f.user, f.rule), 0.0) + f.gpu_hours
    return sorted(((u, r, h) for (u, r), h in acc.items()),
                  key=lambda x: (x[1] != ANY, -x[2], x[0], x[1]))
