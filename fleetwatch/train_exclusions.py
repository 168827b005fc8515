"""What ``fleetwatch train`` leaves out of the history: GPU-time known not to be normal.

A model learns each GPU's own normal from its history. A GPU that was failing in that
history (a cooling fault degrading over days) would have its fault learnt as its normal,
and a nightly retrain would absorb the fault one night at a time. So the time of a GPU
under a fired alert of a rule about its heat or its health, and the time of a fault
annotation on it (or on its node or rack), is left out before the fit, with a margin
before each alert opened (a slow fault warms a GPU before any rule sees it). What is
left out is said per GPU, in hours, with why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fleetwatch.history import Day
from fleetwatch.pipeline.store.base import Alert, Annotation

# Rules whose firing says a GPU (or every GPU of a node) ran hot or was failing: its time
# is no example of normal. Rules about links, XIDs of one job, power or stragglers are
# not about the temperature the models learn, and stay in.
EXCLUDING_RULES = frozenset({
    "thermal_health", "fleet_anomaly", "gpu_hot_vs_peers", "gpu_hot_vs_peers_critical",
    "gpu_temp_high", "gpu_temp_critical", "gpu_temp_rising", "gpu_hw_slowdown",
    "gpu_sw_thermal_slowdown", "gpu_mem_temp_high", "gpu_mem_temp_critical", "gpu_lost",
    "gpu_ecc_dbe", "gpu_xid_critical", "gpu_stuck", "gpu_temp_sensor_invalid",
    "gpu_warming_at_steady_power",
    "node_cooling", "rack_cooling"})
ALERT_MARGIN_S = 3600.0  # before an alert opened: the fault was under way, unseen
MINUTE_MS = 60_000


@dataclass(frozen=True)
class Span:
    """Time of one place left out: a GPU (``device`` gpuN), or every GPU of a node or
    rack (``device`` ""; ``place`` names a node or a rack). ``cluster`` "": any."""

    cluster: str
    place: str
    device: str
    start_ts: float
    end_ts: float
    why: str


def spans(alerts: Iterable[Alert], annotations: Iterable[Annotation],
          end_ts: float) -> list[Span]:
    """The spans to leave out: fired alerts of ``EXCLUDING_RULES`` (from an hour before
    they opened until resolved, or ``end_ts`` while open) and fault annotations."""
    out = []
    for a in alerts:
        if a.rule not in EXCLUDING_RULES or a.fired_ts is None:
            continue
        place = a.node or a.rack
        if not place:
            continue
        end = a.resolved_ts if a.resolved_ts is not None else end_ts
        out.append(Span(a.cluster, place, a.device if a.node else "",
                        a.started_ts - ALERT_MARGIN_S, end, f"{a.rule} alert"))
    for n in annotations:
        if n.kind != "fault" or not n.node:
            continue
        end = n.end_ts if n.end_ts is not None else end_ts
        out.append(Span(n.cluster, n.node, n.device, n.start_ts, end,
                        f"fault annotation {n.text!r}" if n.text else "fault annotation"))
    return out


@dataclass
class LeftOut:
    """Per GPU key (cluster/node/gpuN): minutes left out of training, and why."""

    minutes: dict[str, int] = field(default_factory=dict)
    why: dict[str, set[str]] = field(default_factory=dict)

    def lines(self, most: int = 20) -> list[str]:
        """One line per GPU, most hours first (at most ``most``, then a count)."""
        keys = sorted(self.minutes, key=lambda k: (-self.minutes[k], k))
        out = [f"{k}: {self.minutes[k] / 60:.1f} h ({'; '.join(sorted(self.why[k]))})"
               for k in keys[:most]]
        if len(keys) > most:
            out.append(f"and {len(keys) - most} more GPUs")
        return out


def mask(day: Day, keys: Sequence[str], left: Sequence[Span], out: LeftOut) -> np.ndarray:
    """Per GPU and minute of ``day``, True where a span leaves it out (counted in
    ``out``). ``keys``: each GPU's key, in ``day.gpus`` order."""
    m = np.zeros((len(day.gpus), len(day.minutes)), dtype=bool)
    if not left or not len(day.minutes):
        return m
    seen = ~np.isnan(day.values["gpu_temp_c"])
    by_place: dict[str, list[Span]] = {}  # a fleet's week can hold thousands of alerts
    for s in left:
        by_place.setdefault(s.place, []).append(s)
    for i, (c, rack, node, g) in enumerate(day.gpus):
        for s in (*by_place.get(node, ()), *by_place.get(rack, ())):
            if (s.cluster and s.cluster != c) or s.place not in (node, rack) \
                    or (s.device and s.device != f"gpu{g}"):
                continue
            hit = (day.minutes + MINUTE_MS > s.start_ts * 1000) & (day.minutes < s.end_ts * 1000)
            new = hit & ~m[i] & seen[i]
            if new.any():
                out.minutes[keys[i]] = out.minutes.get(keys[i], 0) + int(new.sum())
                out.why.setdefault(keys[i], set()).add(s.why)
            m[i] |= hit
    return m
