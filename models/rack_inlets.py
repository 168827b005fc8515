"""A rack's inlet air (``models.rack``): each node's BMC inlet sensor
(``host_inlet_temp_c``) against its own average over ``INLET_BASE_S``, and per rack, how
many of its nodes read above theirs. A failing cooler shows in the inlet air before the
GPUs' dies follow through their thermal lag. A rise that the other racks' nodes share
(the room, the facility, the weather) is not one rack's: each rack is judged on its
nodes' rise beyond the part of the other, unflagged racks' median rise
(``others_median``) above ``clear`` of the line.

A rack's air far above its peers' now (``peers``: the other racks of its cluster, same
samples) needs no history of its own: it is judged from the first samples, while a
node's own average is still warming up (a processor just started, restarted, rebalanced)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence

import numpy as np

from fleetwatch.frame import Frame

INLET_BASE_S = 600.0  # a node's usual inlet air: its average over this time constant
INLET_MIN_C, INLET_MAX_C = -40.0, 100.0  # the catalogue's range for host_inlet_temp_c

# Per rack code, its nodes' fresh inlet readings; per cluster, each rack's median.
_Levels = tuple[dict[int, list[float]], dict[str, dict[int, float]]]


class Inlets:
    """Each node's inlet air against its own average over ``INLET_BASE_S``; the average
    stands still for a node whose rack's finding holds. ``stale_s``, ``max_step_s`` and
    ``clear``: the rack detector's own (``rack_models.STALE_S``, ``MAX_STEP_S``, ``rack.CLEAR``), so
    that a node's inlet and its GPUs are judged on one clock and one line."""

    def __init__(self, *, stale_s: float, max_step_s: float, clear: float) -> None:
        self.stale_s, self.max_step_s, self.clear = stale_s, max_step_s, clear
        # (cluster, node) -> [average, ts, rise, seconds seen, rack code, last reading,
        # average of its reading less its room's (``peer_room``; NaN: none yet), 1 where
        # its rack was held at its last reading]
        self.state: dict[tuple[str, str], list[float]] = {}
        # Rack code -> [the lowest excess of its air over its peers' seen, since when it
        # has been ``rise_c`` above that (NaN: it is not)]: where its excess began.
        self.excess: dict[int, list[float]] = {}
        # ``_levels`` of the last (time, readings seen, racks known): asked several times a
        # batch (learning places, judging, peers) of the same readings.
        self._version = 0
        self._cached: tuple[tuple[float, int, int], _Levels] | None = None

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self.state if k[1] in gone]:
            del self.state[key]
        self._version += 1

    def update(self, frames: Sequence[Frame], codes: Sequence[int], frozen: Sequence[bool],
               cluster_of: Sequence[str]) -> None:
        self._version += 1
        seen: dict[tuple[str, str], tuple[float, bool]] = {}
        for f, code, still in zip(frames, codes, frozen):
            v = f.host.metrics.get("host_inlet_temp_c")
            if v is None or not INLET_MIN_C <= v <= INLET_MAX_C:  # NaN fails both
                continue
            key = (f.cluster, f.node)
            s = self.state.get(key)
            dt = math.inf if s is None else f.ts - s[1]
            if dt <= 0:
                continue  # a repeated or older frame
            if s is None or dt > self.stale_s and not still:
                # First reading, or back after a gap: a new average (a flagged rack's
                # nodes keep theirs, or a gap would learn the rise).
                self.state[key] = [v, f.ts, 0.0, 0.0, code, v, math.nan, float(still)]
                continue
            if s[7] and not still:
                # Its rack's finding just ended: its air is back with the room's now
                # (``judge``), which is its usual from here; the level it stood at
                # before would count the room's drift since as this rack's.
                s[0] = v
            s[2], s[5] = v - s[0], v
            if not still:
                s[0] += -math.expm1(-dt / INLET_BASE_S) * (v - s[0])
            s[1], s[4], s[7] = f.ts, code, float(still)
            s[3] += min(dt, self.max_step_s)
            seen[key] = (dt, still)
        self._learn_place(seen, cluster_of)

    def _learn_place(self, seen: dict[tuple[str, str], tuple[float, bool]],
                     cluster_of: Sequence[str]) -> None:
        """Each node's usual place against its room (its reading less ``peer_room``),
        averaged over ``INLET_BASE_S`` and standing still while its rack is held."""
        if not seen:
            return
        now = max(s[1] for s in self.state.values())
        held = {int(s[4]) for s in self.state.values() if s[7]}
        room = self.peer_room(now, cluster_of, held)
        for key, (dt, still) in seen.items():
            s = self.state[key]
            level = room.get(int(s[4]))
            if level is None:
                continue
            place = s[5] - level
            if math.isnan(s[6]):
                s[6] = place
            elif not still:
                s[6] += -math.expm1(-dt / INLET_BASE_S) * (place - s[6])

    def judge(self, now: float, rise_c: float, warmup_s: float, flagged: np.ndarray,
              cluster_of: Sequence[str]) -> dict[int, tuple[int, int, float, set[str]]]:
        """Per rack code: (nodes whose inlet reads ``rise_c`` above its average, or
        ``clear`` of it where the rack is flagged, beyond the other racks' median rise;
        nodes judged; the median rise of the warm ones, beyond the others'; the names of
        the nodes judged). A flagged rack's nodes are judged against the other racks'
        air now (``peer_room``), where there is one, and their usual place against it:
        their own average stood still while the room went on drifting."""
        by_rack: dict[int, list[tuple[str, float]]] = {}
        # Rack code -> node -> its rise against the other racks' air now and its usual
        # place among them (held racks that have a room).
        against_room: dict[int, dict[str, float]] = {}
        held = np.flatnonzero(flagged).tolist()
        room = self.peer_room(now, cluster_of, held)
        for (_, node), s in self.state.items():
            if now - s[1] <= self.stale_s and s[3] >= warmup_s:
                code = int(s[4])
                if code in held and code in room and math.isfinite(s[6]):
                    against_room.setdefault(code, {})[node] = s[5] - room[code] - s[6]
                by_rack.setdefault(code, []).append((node, s[2]))
        shared = others_median({code: median_of([r for _, r in rises])
                                for code, rises in by_rack.items()},
                               np.flatnonzero(flagged).tolist())
        out: dict[int, tuple[int, int, float, set[str]]] = {}
        for code, rises in by_rack.items():
            line = rise_c * (self.clear if code < len(flagged) and flagged[code] else 1.0)
            # What the other racks' air does too is the room's, not this rack's cooler;
            # only its part beyond ``clear`` of the line counts (the room's usual drift
            # must not delay one rack's finding).
            base = max(0.0, shared.get(code, 0.0) - self.clear * rise_c)
            placed = against_room.get(code, {})
            # A held rack holds while its air is above both its own level before the
            # flag (less the room's shared rise) and its usual place against the other
            # racks: the first alone counts the room's drift during the hold as the
            # rack's (critical for hours after the repair), the second alone the racks'
            # own slow wander apart over the hold (minutes more, against one peer rack).
            rises = [(n, min(r - base, placed[n]) + base if n in placed else r)
                     for n, r in rises]
            warm = [r - base for _, r in rises if r - base >= line]
            out[code] = (len(warm), len(rises), median_of(warm) if warm else 0.0,
                         {n for n, _ in rises})
        return out

    def peers(self, now: float, line_c: float, rise_c: float, flagged: np.ndarray,
              cluster_of: Sequence[str]) -> dict[int, tuple[int, int, float, float]]:
        """Per rack code whose cluster has other racks, not flagged, with fresh inlet
        readings: (its nodes reading ``line_c`` above the median of those racks' medians,
        or ``clear`` of it where the rack is flagged; nodes judged; their median excess
        over it; since when the rack's median excess has been ``rise_c`` above the lowest
        it was seen at, NaN where it is not or was never seen lower). No warm-up: the
        comparison is between readings of the same time.

        With ``MIN_SHARED`` such racks or more, a rack above them is judged from the first
        sample. With fewer (a small fleet: one or two other racks), the others cannot
        stand for the room, and a rack above them since the first sample may be any
        rack's doing: only a rack whose excess over them grew (it rose from its own place
        among them while they did not: ``since`` set) counts as above them."""
        level, by_cluster = self._levels(now, cluster_of)
        out: dict[int, tuple[int, int, float, float]] = {}
        held_codes = np.flatnonzero(flagged).tolist()
        for racks in by_cluster.values():
            shared = others_median(racks, held_codes)
            for code, room in self._loose_peers(racks, held_codes).items():
                held = code < len(flagged) and flagged[code]
                excess = [v - room for v in level[code]]
                judged = self._excess(code, now, excess, rise_c,
                                      line_c * (self.clear if held else 1.0))
                if code not in shared and math.isnan(judged[3]):
                    judged = (0, judged[1], 0.0, math.nan)  # no rise of its own seen
                out[code] = judged
        for code in [k for k in self.excess if k not in out]:
            del self.excess[code]
        return out

    def _levels(self, now: float, cluster_of: Sequence[str]) -> _Levels:
        """Per rack code, its nodes' fresh inlet readings; per cluster, each rack's median.
        The same (time, readings, racks) are asked for several times a batch: kept once."""
        key = (now, self._version, len(cluster_of))
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        level: dict[int, list[float]] = {}
        for s in self.state.values():
            if now - s[1] <= self.stale_s:
                level.setdefault(int(s[4]), []).append(s[5])
        by_cluster: dict[str, dict[int, float]] = {}
        for code, values in level.items():
            by_cluster.setdefault(cluster_of[code], {})[code] = median_of(values)
        self._cached = (key, (level, by_cluster))
        return level, by_cluster

    def room(self, now: float, cluster_of: Sequence[str], flagged: Collection[int]
             ) -> dict[int, float]:
        """Per rack code: the room's air around it, the median of the other racks' median
        readings of its cluster, leaving out the ``flagged`` ones (``others_median``: three
        or more such racks), so that neither its own cooler nor a failing one counts."""
        level, by_cluster = self._levels(now, cluster_of)
        out: dict[int, float] = {}
        for racks in by_cluster.values():
            out |= others_median(racks, flagged)
        return out

    def peer_room(self, now: float, cluster_of: Sequence[str], flagged: Collection[int]
                  ) -> dict[int, float]:
        """Per rack code: the median of the other racks' median readings of its cluster
        that are not ``flagged``, where one or more is left. Looser than ``room``: it
        only says whether a flagged rack's air is back with the rest (a rack that is
        not cannot pass for the room)."""
        _, by_cluster = self._levels(now, cluster_of)
        out: dict[int, float] = {}
        for racks in by_cluster.values():
            out |= self._loose_peers(racks, flagged)
        return out

    @staticmethod
    def _loose_peers(racks: dict[int, float], flagged: Collection[int]) -> dict[int, float]:
        """Per rack: the median of the other racks' medians that are not ``flagged``, where
        one or more is left (``others_median`` where ``MIN_SHARED`` are)."""
        return _others(racks, [k for k in racks if k not in flagged])

    def _excess(self, code: int, now: float, excess: list[float], rise_c: float,
                line_c: float) -> tuple[int, int, float, float]:
        """One rack's peer judgement, and where its excess began: after the last sample
        within ``rise_c`` of the lowest excess seen (its usual place among the racks); NaN
        while it has stayed there, however high that is."""
        median = median_of(excess)
        # Its usual place is the lowest excess seen: a rack far above its peers from its
        # first sample has no "began" (NaN) — a hot aisle, or a failure older than the
        # data, which cannot be told apart — until its excess grows beyond that.
        low, since = self.excess.get(code, [math.inf, math.nan])
        low = min(low, median)
        if median < low + rise_c:
            since = math.nan
        elif math.isnan(since):
            since = now
        self.excess[code] = [low, since]
        over = [e for e in excess if e >= line_c]
        return len(over), len(excess), median_of(over) if over else 0.0, since


# A rise is the room's only where at least this many other racks, none of them flagged,
# share it: with fewer, the room and those racks' own coolers cannot be told apart (two
# racks of a small fleet failing together, or one failing while the other already is),
# and a cooling failure missed costs more than a warm room paged.
MIN_SHARED = 3


def median_of(values: Sequence[float]) -> float:
    """The median of a few finite readings (a rack's nodes, a cluster's racks), as
    ``np.median`` gives it: in pure Python, several times quicker on a handful of values,
    which a rack's judgement asks for hundreds of times a batch. NaN for none."""
    n = len(values)
    if not n:
        return math.nan
    ranked = sorted(values)
    half = n // 2
    return float(ranked[half]) if n % 2 else 0.5 * (ranked[half - 1] + ranked[half])


def others_median(values: dict[int, float], flagged: Collection[int] = ()
                  ) -> dict[int, float]:
    """Per key: the median of the other keys' values, leaving out the ``flagged`` ones
    (racks whose finding holds: their rise is their own cooler's, not the room's); none
    where fewer than ``MIN_SHARED`` such others are left."""
    among = [k for k in values if k not in flagged]
    n = len(among)
    kept = set(among)
    return {k: v for k, v in _others(values, among).items()
            if n - (k in kept) >= MIN_SHARED}


def _others(values: dict[int, float], among: Iterable[int]) -> dict[int, float]:
    """Per key: the median of the values of ``among`` but its own, where one is left.
    Sorted once: leaving out the value at sorted place k shifts the places after it."""
    keys = sorted(among, key=values.__getitem__)
    ranked = [values[k] for k in keys]
    out: dict[int, float] = {}
    if ranked:
        middle = median_of(ranked)
        chosen = set(keys)
        out = {k: middle for k in values if k not in chosen}
    m = len(ranked) - 1
    for k, key in enumerate(keys):
        if m < 1:
            break
        lo, hi = (m - 1) // 2, m // 2
        out[key] = 0.5 * (ranked[lo + (lo >= k)] + ranked[hi + (hi >= k)])
    return out
