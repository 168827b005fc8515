"""Lemon nodes: the few nodes that cause a large share of the fleet's trouble.

Every node keeps a score: each piece of trouble adds points (an XID by its
severity, a GPU lost, a thermal slowdown that starts), and the score decays
exponentially with a half-life of days, so a node that had one bad night
recovers while a node that keeps failing climbs. Past ``threshold`` the node
gets a node-level finding ("take it out of the pool and have it serviced"),
and ``ranking()`` lists the worst first for the dashboard.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter

import numpy as np

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.batch import COL, columns, throttle_bits
from fleetwatch.models.gpu_state import GpuState, arrival

# Points per XID when no XID table says otherwise: hardware faults weigh, the
# application's own errors (13, 43, 31) barely count.
DEFAULT_XID_POINTS: dict[int, float] = {
    79: 5.0, 48: 3.0, 95: 3.0, 94: 2.0, 64: 2.0, 63: 1.0, 74: 2.0, 92: 1.0, 119: 2.0,
    120: 2.0, 61: 2.0, 62: 2.0, 45: 0.0, 13: 0.2, 43: 0.1, 31: 0.3}
LOST_POINTS = 5.0
THERMAL_SLOWDOWN_POINTS = 0.5
# A GPU that falls off the bus reports XID 79 and is then lost: one incident, counted
# once (by its XID) when the loss follows the XID within this time.
FELL_OFF_S = 3600.0


def lost_points(fell_ts: float | None, lost_ts: float) -> float:
    """Points for a GPU lost at ``lost_ts`` whose last XID 79 was at ``fell_ts``."""
    return 0.0 if fell_ts is not None and 0.0 <= lost_ts - fell_ts <= FELL_OFF_S else LOST_POINTS
_THERMAL = THROTTLE_FLAGS["hw_thermal_slowdown"] | THROTTLE_FLAGS["hw_slowdown"]
_REASONS = COL["gpu_throttle_reasons"]
_xids = attrgetter("xids")


class LemonScore:
    """Decayed trouble per node; a detector with a node-level rule."""

    name = "lemon_node"
    rules: Mapping[str, tuple[str, ...]] = {"lemon_node": ()}

    def __init__(self, half_life_d: float = 7.0, threshold: float = 10.0,
                 xid_points: Callable[[int], float] | None = None) -> None:
        self.half_life_s = half_life_d * 86400.0
        self.threshold = threshold
        self._xid_points = xid_points or (lambda code: DEFAULT_XID_POINTS.get(code, 1.0))
        # (cluster, node) -> [score, ts of score]; rack kept for findings
        self._score: dict[tuple[str, str], list[float]] = {}
        self._rack: dict[tuple[str, str], str] = {}
        self._lost: set[tuple[str, str, int]] = set()
        self._hot: set[tuple[str, str, int]] = set()
        self._fell: dict[tuple[str, str, int], float] = {}  # GPU -> ts of its last XID 79
        # The lost and hot sets by GPU slot (never dropped, as the sets are not).
        self._state = GpuState({"lost": False, "hot": False})

    def seed(self, scores: Mapping[tuple[str, str], tuple[float, float]]) -> None:
        """Start from scores computed over history (``fleetwatch train``): (score, at ts)."""
        for key, (score, ts) in scores.items():
            self._score[key] = [score, ts]

    def drop(self, nodes: Sequence[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self._score if k[1] in gone]:
            del self._score[key]
        for gk in [k for k in self._fell if k[1] in gone]:
            del self._fell[gk]

    def _add(self, key: tuple[str, str], ts: float, points: float) -> None:
        s = self._score.get(key)
        if s is None:
            self._score[key] = [points, ts]
            return
        s[0] = s[0] * 0.5 ** (max(0.0, ts - s[1]) / self.half_life_s) + points
        s[1] = max(s[1], ts)

    def score(self, cluster: str, node: str, ts: float) -> float:
        s = self._score.get((cluster, node))
        if s is None:
            return 0.0
        return s[0] * 0.5 ** (max(0.0, ts - s[1]) / self.half_life_s)

    def ranking(self, ts: float, top: int = 20) -> list[tuple[str, str, float]]:
        """(cluster, node, score) of the worst nodes now, highest first."""
        rows = [(c, n, self.score(c, n, ts)) for c, n in self._score]
        return sorted((r for r in rows if r[2] > 0.01), key=lambda r: -r[2])[:top]

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        out: list[Finding] = []
        if not frames:
            return out
        for f, eventful in zip(frames, self._eventful(frames).tolist()):
            key = (f.cluster, f.node)
            self._rack[key] = f.rack
            if eventful:
                self._events(f, key)
            score = self.score(f.cluster, f.node, f.ts)
            if score >= self.threshold and not math.isnan(score):
                out.append(Finding(
                    self.name, f.cluster, f.rack, f.node, None, f.ts, round(score, 2),
                    f"{f.node} keeps failing: trouble score {score:.1f} (half-life "
                    f"{self.half_life_s / 86400:g} d, threshold {self.threshold:g})",
                    "warning", 0.0, evidence={"score": round(score, 2)},
                    action="Drain the node from the scheduler pool and have it serviced; "
                           "it is a repeat offender.", scope="node"))
        return out

    def _eventful(self, frames: Sequence[Frame]) -> np.ndarray:
        """Per frame as handed over: whether it has an XID, or a GPU that is lost or in a
        thermal slowdown anew, or no longer (the few frames ``_events`` reads GPU by
        GPU). The batch's columns say, a wave at a time; ``_state`` mirrors the lost and
        hot sets by GPU slot."""
        b = columns(frames)
        order = arrival(frames, b)
        slots = self._state.slots(b)[order.rows]
        present = b.present[order.rows]
        lost = b.lost[order.rows]
        reasons = b.x[:, :, _REASONS][order.rows]
        hot = (throttle_bits(reasons) & _THERMAL) != 0
        out = np.fromiter((any(map(_xids, f.gpus)) for f in frames), bool, len(frames))
        was_lost, was_hot = self._state["lost"], self._state["hot"]
        for wave in order.waves:
            wi, gj = np.nonzero(present[wave])
            i = wave[wi]
            s = slots[i, gj]
            now_lost, now_hot = lost[i, gj], hot[i, gj]
            out[i[(now_lost != was_lost[s]) | (now_hot != was_hot[s])]] = True
            was_lost[s], was_hot[s] = now_lost, now_hot
        return out

    def _events(self, f: Frame, key: tuple[str, str]) -> None:
        for g in f.gpus:
            gk = (f.cluster, f.node, g.index)
            for code in g.xids:
                self._add(key, f.ts, self._xid_points(code))
                if code == 79:
                    self._fell[gk] = f.ts
            if g.state == "lost":
                if gk not in self._lost:
                    self._lost.add(gk)
                    self._add(key, f.ts, lost_points(self._fell.get(gk), f.ts))
            else:
                self._lost.discard(gk)
            reasons = g.metrics.get("gpu_throttle_reasons")
            if reasons is not None and int(reasons) & _THERMAL:
                if gk not in self._hot:
                    self._hot.add(gk)
                    self._add(key, f.ts, THERMAL_SLOWDOWN_POINTS)
            else:
                self._hot.discard(gk)
