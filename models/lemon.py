"""Lemon nodes: the few nodes that cause a large share of the fleet's trouble.

Every node keeps a score: each piece of trouble adds points (a hardware XID
incident by its worst code, a GPU lost, a thermal slowdown that starts), and the
score decays exponentially with a half-life of days, so a node that had one bad
night recovers while a node that keeps failing climbs. Past ``threshold`` the
node gets a node-level finding ("take it out of the pool and have it serviced"),
and ``ranking()`` lists the worst first (the monthly report's repeat offenders).

An incident is what one GPU reports within ``INCIDENT_S`` of its first XID: the
16 XID 13 lines of one exception, the five XID 119 of one GSP hang, a 48 then 63
then 64 of one ECC fault count once, by the worst code. Application XIDs (the
``info`` class of the XID table: 13, 31, 43, 45 ...) are the job's fault, not
the node's, and score nothing.

A thermal slowdown is trouble of the board's only where its air is not to blame: the
slowdowns of one node within ``INCIDENT_S`` of the first are one incident (a GPU flapping
at its slowdown temperature, or its neighbours following it), and none counts while a
cooling finding holds for its rack or node (``explained``: a failed cooler is the room's
fault, not the board's). A repeat offender is a node whose trouble recurs: the score must
have built up over at least ``MIN_SPAN_S`` (one bad night is not a lemon, however many
points it scored), as in the lemon-node practice of large training clusters, where a
node is retired for failing again and again over days and weeks, not for one event.

Scores are kept in memory; ``use_events`` gives the detector the store's event
reader, from which it rebuilds each node's score (over ``HISTORY_HALF_LIVES``
half-lives) when it first sees the node, so a restart or a partition moving to
another processor does not reset days of evidence; frames read again after the
restart (up to the node's newest stored event) add nothing twice.

What each piece of trouble is worth is in ``lemon_points``; the report's repeat
offenders of a period, from stored events, in ``lemon_report``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Protocol

import numpy as np

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.batch import COL, columns, throttle_bits
from fleetwatch.models.gpu_state import GpuState, arrival
from fleetwatch.models.lemon_points import (
    INCIDENT_S,
    THERMAL_SLOWDOWN_POINTS,
    UNSCORED_XIDS,
    Incidents,
    lost_points,
)

# How far back a node's score is rebuilt from stored events, in half-lives (1/16 left).
HISTORY_HALF_LIVES = 4.0
# A node is a repeat offender only where its standing trouble began at least this long ago.
MIN_SPAN_S = 86400.0
# Trouble that began under this share of the threshold starts a new span.
FRESH_SHARE = 0.1


class StoredEvent(Protocol):
    """What the rebuild reads of a stored event (the store's ``Event``)."""

    @property
    def ts(self) -> float: ...
    @property
    def kind(self) -> str: ...
    @property
    def cluster(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def code(self) -> int: ...
    @property
    def value(self) -> str: ...


def event_order(e: StoredEvent) -> tuple[float, int]:
    """Stored events in time order, a frame's XIDs before its GPU states (as ``_events``
    reads a frame): the XID 79 and the loss it causes share a time, one incident. A board
    replaced comes first: the frame that names the new board is the new board's."""
    return (e.ts, 0 if e.kind == "gpu_replaced" else 1 if e.kind == "xid" else 2)


# The store's ``events(start_ts, end_ts, node=None, kinds=None, except_xids=())`` (models
# do not import it).
EventReader = Callable[..., Sequence[StoredEvent]]
log = logging.getLogger(__name__)
_THERMAL = THROTTLE_FLAGS["hw_thermal_slowdown"] | THROTTLE_FLAGS["hw_slowdown"]
_REASONS = COL["gpu_throttle_reasons"]
_xids = attrgetter("xids")
# The stored events a node's score is rebuilt from.
_KINDS = ("xid", "gpu_state", "gpu_replaced")


class LemonScore:
    """Decayed trouble per node; a detector with a node-level rule."""

    name = "lemon_node"
    rules: Mapping[str, tuple[str, ...]] = {"lemon_node": ()}

    def __init__(self, half_life_d: float = 7.0, threshold: float = 10.0,
                 xid_points: Callable[[int], float] | None = None,
                 explained: Callable[[str, str, str], bool] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.half_life_s = half_life_d * 86400.0
        # "Now" for a rebuild's window: the wall's live, the data's in a replay (a store's
        # events after the frame's time are the recording's future, not its past).
        self.clock = clock or time.time
        self.threshold = threshold
        # (cluster, rack, node) -> whether a cooling finding holds for it now (the rack
        # detector's ``explains``; wired by ``wiring.linked``).
        self.explained = explained
        self._thermal: dict[tuple[str, str], float] = {}  # node -> its thermal incident's start
        self._since: dict[tuple[str, str], float] = {}  # node -> when its standing trouble began
        self._incidents = Incidents(xid_points) if xid_points else Incidents()
        # The store's event reader (``use_events``), nodes whose score it rebuilt, and per
        # node the newest stored event then read: frames up to it were counted already.
        self._events_of: EventReader | None = None
        self._rebuilt: dict[tuple[str, str], float] = {}
        # (cluster, node) -> [score, ts of score]; rack kept for findings
        self._score: dict[tuple[str, str], list[float]] = {}
        self._rack: dict[tuple[str, str], str] = {}
        self._lost: set[tuple[str, str, int]] = set()
        self._hot: set[tuple[str, str, int]] = set()
        self._fell: dict[tuple[str, str, int], float] = {}  # GPU -> ts of its last XID 79
        # The lost and hot sets by GPU slot (dropped with the node, as the sets are).
        self._state = GpuState({"lost": False, "hot": False})

    def seed(self, scores: Mapping[tuple[str, str], tuple[float, float]]) -> None:
        """Start from scores computed over history (``fleetwatch train``): (score, at ts).
        A node rebuilt from the store's events keeps that: they are newer than a model."""
        for key, (score, ts) in scores.items():
            if key not in self._rebuilt:
                self._score[key] = [score, ts]

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Rebuild scores up to this clock's "now" (a replay's: the data's time)."""
        self.clock = clock

    def use_events(self, events: EventReader | None) -> None:
        """Rebuild each node's score from these stored events when it is first seen (the
        store's ``events``; None: keep scores in memory only)."""
        self._events_of = events

    def drop(self, nodes: Sequence[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self._score if k[1] in gone]:
            del self._score[key]
        for gk in [k for k in self._fell if k[1] in gone]:
            del self._fell[gk]
        for key in [k for k in (*self._thermal, *self._since) if k[1] in gone]:
            self._thermal.pop(key, None)
            self._since.pop(key, None)
        for key in [k for k in self._rebuilt if k[1] in gone]:
            del self._rebuilt[key]  # rebuilt again if its partition comes back
        self._incidents.drop(gone)
        # Its GPUs' lost and hot marks too (rebuilt with its score from the stored events
        # if it comes back): a pool that churns names must not hold one per GPU ever seen.
        self._rack = {k: v for k, v in self._rack.items() if k[1] not in gone}
        self._lost = {k for k in self._lost if k[1] not in gone}
        self._hot = {k for k in self._hot if k[1] not in gone}
        self._state.drop(gone)

    def _add(self, key: tuple[str, str], ts: float, points: float) -> None:
        if points > 0.0 and self.score(*key, ts) < FRESH_SHARE * self.threshold:
            self._since[key] = ts
        s = self._score.get(key)
        if s is None:
            self._score[key] = [points, ts]
            return
        s[0] = s[0] * 0.5 ** (max(0.0, ts - s[1]) / self.half_life_s) + points
        s[1] = max(s[1], ts)

    def repeat(self, cluster: str, node: str, ts: float) -> bool:
        """Has the node's standing trouble lasted ``MIN_SPAN_S`` (a seeded score, whose
        start is unknown, counts as having)?"""
        return ts - self._since.get((cluster, node), -math.inf) >= MIN_SPAN_S

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
        if self._events_of is not None:
            self._rebuild(frames)
        for f, eventful in zip(frames, self._eventful(frames).tolist()):
            key = (f.cluster, f.node)
            self._rack[key] = f.rack
            if eventful:
                self._events(f, key, f.ts <= self._rebuilt.get(key, -math.inf))
            score = self.score(f.cluster, f.node, f.ts)
            if score >= self.threshold and self.repeat(f.cluster, f.node, f.ts):
                out.append(Finding(
                    self.name, f.cluster, f.rack, f.node, None, f.ts, round(score, 2),
                    f"{f.node} keeps failing: trouble score {score:.1f} (half-life "
                    f"{self.half_life_s / 86400:g} d, threshold {self.threshold:g}) over "
                    f"{self._span_d(key, f.ts)}", "warning", 0.0,
                    evidence={"score": round(score, 2)},
                    action="Drain the node from the scheduler pool and have it serviced; "
                           "it is a repeat offender.", scope="node"))
        return out

    def _span_d(self, key: tuple[str, str], ts: float) -> str:
        since = self._since.get(key)
        return "more than the history read" if since is None else \
            f"{(ts - since) / 86400:.1f} days"

    def _slowdown(self, f: Frame, key: tuple[str, str]) -> float:
        """The points of a thermal slowdown starting now: none within its node's thermal
        incident, none where a cooling finding explains it (the air, not the board)."""
        if self.explained is not None and self.explained(f.cluster, f.rack, f.node):
            return 0.0
        if 0.0 <= f.ts - self._thermal.get(key, -math.inf) < INCIDENT_S:
            return 0.0
        self._thermal[key] = f.ts
        return THERMAL_SLOWDOWN_POINTS

    def _eventful(self, frames: Sequence[Frame]) -> np.ndarray:
        """Per frame as handed over: whether it has an XID, or a GPU that is lost or in a
        thermal slowdown anew, or no longer (the few frames ``_events`` reads GPU by
        GPU). The batch's columns say, a wave at a time; ``_state`` mirrors the lost and
        hot sets by GPU slot."""
        b = columns(frames)
        order = arrival(frames, b)
        slots = self._state.slots(b)[order.rows]
        for key in self._state.replaced:  # the old board's XID 79 or loss is not the new's
            self._fell.pop(key, None)
            self._lost.discard(key)
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

    def _rebuild(self, frames: Sequence[Frame]) -> None:
        """Scores of the nodes seen for the first time, from the store's events."""
        new = {(f.cluster, f.node) for f in frames} - self._rebuilt.keys()
        if not new or self._events_of is None:
            return
        end = max(max(f.ts for f in frames), self.clock()) + 60.0
        start = end - HISTORY_HALF_LIVES * self.half_life_s
        nodes = {n for _, n in new}
        # One read for many nodes (a start), one per node for a few (a partition moved).
        reads = [None] if len(nodes) > 8 else sorted(nodes)
        events: list[StoredEvent] = []
        for key in new:
            self._rebuilt[key] = -math.inf  # tried once: a store that fails is not asked again
        try:
            for node in reads:
                events += [e for e in self._events_of(start, end, node=node,
                                                      kinds=list(_KINDS),
                                                      except_xids=UNSCORED_XIDS)
                           if (e.cluster, e.node) in new]
        except Exception as exc:  # a write-only store, or one that is away: keep scoring
            log.warning("lemon scores of %d node(s) start from zero: the store's events could "
                        "not be read (%s); they count what arrives from now on", len(new), exc)
            return
        self.load_events(events)

    def load_events(self, events: Iterable[StoredEvent]) -> None:
        """Count stored events (a report's or a rebuild's): XIDs, GPUs lost, boards replaced."""
        events = sorted(events, key=event_order)
        for e in events:
            self._rebuilt.setdefault((e.cluster, e.node), -math.inf)
        self._replay(events)

    def _replay(self, events: Iterable[StoredEvent]) -> None:
        """Count stored events as ``_events`` counts frames."""
        for e in events:
            key, digits = (e.cluster, e.node), e.device.removeprefix("gpu")
            if not digits.isdigit():
                continue
            gk = (e.cluster, e.node, int(digits))
            self._rebuilt[key] = max(self._rebuilt[key], e.ts)
            if e.kind == "xid":
                self._add(key, e.ts, self._incidents.add((e.cluster, e.node, e.device), e.ts,
                                                         e.code))
                if e.code == 79:
                    self._fell[gk] = e.ts
            elif e.kind == "gpu_replaced":  # the old board's XID 79 or loss is not the new's
                self._fell.pop(gk, None)
                self._lost.discard(gk)
            elif e.value == "lost" and gk not in self._lost:
                self._lost.add(gk)
                self._add(key, e.ts, lost_points(self._fell.get(gk), e.ts))
            elif e.value == "ok":
                self._lost.discard(gk)

    def _events(self, f: Frame, key: tuple[str, str], counted: bool = False) -> None:
        """The points of one frame's trouble; ``counted``: its XIDs were rebuilt from the
        store already (a frame read again after a restart)."""
        for g in f.gpus:
            gk = (f.cluster, f.node, g.index)
            for code in () if counted else g.xids:
                self._add(key, f.ts, self._incidents.add((f.cluster, f.node, f"gpu{g.index}"),
                                                         f.ts, code))
                if code == 79:
                    self._fell[gk] = f.ts
            if counted:  # the stored events set the lost GPUs as of their newest
                pass
            elif g.state == "lost":
                if gk not in self._lost:
                    self._lost.add(gk)
                    self._add(key, f.ts, lost_points(self._fell.get(gk), f.ts))
            else:
                self._lost.discard(gk)
            reasons = g.metrics.get("gpu_throttle_reasons")
            if reasons is not None and int(reasons) & _THERMAL:
                if gk not in self._hot:
                    self._hot.add(gk)
                    self._add(key, f.ts, self._slowdown(f, key))
            else:
                self._hot.discard(gk)
