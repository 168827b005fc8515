"""XID events: each classified by the XID table (fleetwatch/xids.csv), latched for a hold time.

One alert per GPU and severity lists every XID seen while it is open (code, count,
first and last time) and suggests the most drastic action among them (the table's
``rank``). A code new to the open alert raises its ``REVISION``, so the alert is
written and notified again; an open alert loaded from the store after a restart is
adopted with the codes its evidence holds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import REVISION, Finding, OpenAlert
from fleetwatch.models.batch import gpu_finding
from fleetwatch.xids import describe

# One XID code on one open XID alert: how often it came, first and last time.
_Seen = dict[int, list[float]]  # code -> [count, first ts, last ts]
_XidKey = tuple[str, str, int, str]  # (cluster, node, gpu, severity)


class XidEvents:
    """Each XID a GPU reports, classified by the XID table (fleetwatch/xids.csv).

    One alert per GPU and severity; while it holds (``hold_s`` after the last XID),
    every XID of that severity joins it: the message lists each code with its count
    and times, the action is that of the most drastic (the table's ``rank``: RMA over
    drain-and-reset), and a code new to the alert bumps its ``revision`` so the sinks
    hear of it. The codes seen are kept in the evidence (``xid_CODE_count``,
    ``xid_CODE_first_ts``, ``xid_CODE_last_ts``), from which ``adopt`` takes an open
    alert over after a restart."""

    name = "xid"
    rules: dict[str, tuple[str, ...]] = {
        "gpu_xid_critical": (), "gpu_xid_warning": (), "gpu_xid_info": ()}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self._seen: dict[_XidKey, _Seen] = {}

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self._seen if k[1] in gone]:
            del self._seen[key]

    def adopt(self, alerts: Iterable[OpenAlert]) -> None:
        """Take over the XIDs of open XID alerts (loaded from the store at start, or for
        nodes this processor now owns), so later XIDs join them."""
        for a in alerts:
            severity = a.rule.removeprefix("gpu_xid_")
            digits = a.device.removeprefix("gpu")
            if a.rule not in self.rules or not digits.isdigit() or a.state == "resolved":
                continue
            gpu = int(digits)
            seen = _seen_of(a.evidence or {})
            if seen:
                self._seen[(a.cluster, a.node, gpu, severity)] = seen

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        out = []
        for f in frames:
            for g in f.gpus:
                if g.xids:
                    out.extend(self._classify(f, g.index, g.xids))
        return out

    def _classify(self, f: Frame, gpu: int, codes: tuple[int, ...]) -> list[Finding]:
        by_severity: dict[str, list[int]] = {}
        for code in codes:
            by_severity.setdefault(describe(code).severity, []).append(code)
        out = []
        for severity, now in by_severity.items():
            hold = self.c.xid_info_hold_s if severity == "info" else self.c.xid_hold_s
            key = (f.cluster, f.node, gpu, severity)
            seen = self._seen.get(key)
            if seen is None or f.ts >= max(s[2] for s in seen.values()) + hold:
                seen = self._seen[key] = {}  # the alert before (if any) has ended
            for code in now:
                s = seen.setdefault(code, [0.0, f.ts, f.ts])
                s[0] += 1
                s[1], s[2] = min(s[1], f.ts), max(s[2], f.ts)
            out.append(_xid_finding(f, gpu, severity, seen, hold))
        return out


def _seen_of(evidence: Mapping[str, float]) -> _Seen:
    """The codes an XID alert's evidence lists (see ``_xid_finding``)."""
    seen: _Seen = {}
    for k, v in evidence.items():
        parts = k.split("_")
        if len(parts) == 3 and parts[0] == "xid" and parts[1].isdigit() and parts[2] == "count":
            code = int(parts[1])
            first = evidence.get(f"xid_{code}_first_ts")
            last = evidence.get(f"xid_{code}_last_ts")
            if first is not None and last is not None:
                seen[code] = [float(v), float(first), float(last)]
    return seen


def _xid_finding(f: Frame, gpu: int, severity: str, seen: _Seen, hold: float) -> Finding:
    """One XID alert's finding: every code seen while it holds, the worst first."""
    # The most drastic action wins; of equal ones, the latest XID.
    order = sorted(seen, key=lambda c: (-describe(c).rank, -seen[c][2], c))
    worst = describe(order[0])
    evidence = {"xid": float(worst.code), "count": sum(s[0] for s in seen.values()),
                REVISION: float(len(seen))}
    listed = []
    for code in order:
        n, first, last = seen[code]
        evidence.update({f"xid_{code}_count": n, f"xid_{code}_first_ts": first,
                         f"xid_{code}_last_ts": last})
        when = _hms(first) if n == 1 else f"{n:.0f}x, {_hms(first)} to {_hms(last)}"
        listed.append(f"{code} ({describe(code).name}) {when}")
    return gpu_finding(f, gpu, f"gpu_xid_{severity}", worst.code,
                       f"GPU {gpu} on {f.node}: XID {'; '.join(listed)}", severity, 0.0,
                       evidence, worst.action, hold)


def _hms(ts: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(ts))
