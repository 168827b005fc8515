"""The stream's clock of ``NodeSilence`` (node_silence.py): "now", the consensus of the
nodes heard from lately, when each node was last heard of on it, the time each node is
judged at while its partition is caught up, and the time a live processor has spent
listening (see ``StreamClock``).

A mixin of ``NodeSilence``, which holds the per-node arrays it reads.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_agents import NodeKey

# Between two ticks or batches of a live processor, at most this much of its clock counts
# as time spent listening: longer, the processor itself was stopped (SIGSTOP, a long
# pause, stuck joining its group), not listening.
TICK_GAP_S = 5.0


class StreamClock:
    """"Now" on the stream's clock, and when each node was last heard of on it.

    "Now" is a consensus of the nodes heard from lately: the newest of their latest
    times that is at most ``step`` (``silent_min_s`` / 2, or two of the fleet's usual
    intervals) past their lower median, never later than the processor's own clock where
    it passes one. Heard from lately: among the senders of the last ``2 x nodes`` frames
    to arrive (nodes not judged silent); and, where frames come live from a bus (a
    ``wall`` clock is given), whose last frame arrived within ``step`` of the time this
    processor has spent listening (``_listen``: its clock, less what it did not hear,
    its brokers away or itself stopped). So nodes that stop, however many of the fleet
    (a hall's power), leave the consensus within a step, not once the few left have sent
    ``2 x nodes`` frames, and so do a flood's one-frame nodes; a pause of the whole
    stream not listened to leaves the set as it was. A jump of "now" by more than
    ``step`` ends such a pause: it counts against none of the nodes heard from lately.
    While a partition still holds frames not read yet (``behind``), its nodes are judged
    on the time it has reached.
    """

    c: DetectorsConfig
    now: float
    _index: dict[NodeKey, int]
    _where: list[tuple[str, str, str]]
    _last: np.ndarray
    _heard: np.ndarray
    _seq: np.ndarray
    _came: np.ndarray
    _listen: float
    _tick_wall: float | None
    _skew: np.ndarray
    _interval: np.ndarray
    _arrived: int
    _gone: int
    _lanes: dict[Hashable, list[NodeKey]]

    if TYPE_CHECKING:  # in NodeSilence
        def _limits(self) -> np.ndarray: ...

    def behind(self, nodes: Mapping[NodeKey, Hashable]) -> None:
        """Which nodes' partitions still hold frames not read yet ((cluster, node) ->
        partition), as of the poll that brought the next batch; an empty mapping: every
        partition has been read to its end. Judged on their partition's own time until then."""
        lanes: dict[Hashable, list[NodeKey]] = {}
        for node, lane in nodes.items():
            lanes.setdefault(lane, []).append(node)
        self._lanes = lanes

    def _listened(self, wall: float) -> float:
        """The time this processor listened since its last batch or tick, up to ``wall``
        (its clock), added to ``_listen``: none after it could not hear (``deaf``), at
        most ``TICK_GAP_S`` (longer, it was stopped itself)."""
        last = self._tick_wall
        gap = 0.0 if last is None else min(max(wall - last, 0.0), TICK_GAP_S)
        self._listen += gap
        return gap

    def _recent(self, step: float) -> np.ndarray:
        """The nodes heard from lately (see the class): among the senders of the last
        ``2 x nodes`` frames to arrive, of the nodes not judged silent or stopped when
        last judged (on a pool that scales, the names gone, held up to ``FORGET_S``, would
        widen the window to hours of frames and their old last frames hold "now" back);
        and, of the nodes whose frames came live, whose last one arrived within ``step``
        of listening."""
        n = len(self._where)
        counted = self._seq[:n] > self._arrived - 2 * max(1, n - self._gone)
        with np.errstate(invalid="ignore"):  # NaN: none came live (a replay's)
            late = self._listen - self._came[:n] > step
        return counted & ~late

    def _advance(self, wall: float | None, batch: list[int]) -> None:
        """Move "now" to the consensus of the nodes heard from lately (see the class)."""
        n, step, prev = len(self._where), self._step(), self.now
        recent = self._recent(step)
        if self._lanes:
            # Catching up: the partitions read furthest set it (each by its own nodes'
            # consensus), not a median that the partitions read least would drag back.
            # A partition read to its end in this batch counts, however many frames
            # of the others followed its own.
            rest = recent.copy()
            rest[batch] = True
            reached = []
            for lane, at in self._reached():
                rest[lane] = False
                reached.append(at)
            reached.append(_consensus(self._last[:n][rest], step))
            now = float(np.nanmax(reached)) if not np.isnan(reached).all() else math.nan
        else:
            now = _consensus(self._last[:n][recent], step)
        if now != now:  # NaN: no node heard from lately
            return
        if wall is not None:
            now = min(now, wall)
        if now > prev + step and prev > -math.inf:
            # The whole fleet paused: the pause counts against none of the nodes heard
            # from lately; each one's silence so far is kept.
            heard = self._heard[:n]
            shift = recent & (heard <= prev)
            heard[shift] += now - prev
        if now >= prev or (now < prev - step and not self._lanes):
            # Back by more than a step: the earlier "now" was set by nodes no longer
            # heard from (a first batch of one frame stamped years ahead). Not while
            # catching up: the partitions read to their end set it, then fell quiet.
            self.now = now

    def _hear(self, span: dict[int, tuple[float, float]]) -> None:
        """When each node of the batch was heard of, on "now"'s clock (see the class).

        ``span``: each node's oldest and newest frame time in the batch. A node whose
        newest frame is older than its limit, and older than every frame in the batch of
        the nodes in step (a batch that spans minutes, a backlog or a replay's, holds the
        last frames of a node that died in it), is behind: heard of now."""
        limits, clocks = self._limits(), self._clocks(self.now)
        in_step = {i: clocks[i] - limits[i] <= newest <= clocks[i]
                   for i, (_, newest) in span.items()}
        floor = min((oldest for i, (oldest, _) in span.items() if in_step[i]),
                    default=math.inf)
        for i, (_, ts) in span.items():
            now = float(clocks[i])
            heard = ts if in_step[i] or now >= ts >= floor else now
            if not self._heard[i] >= heard:
                self._heard[i] = heard
                self._skew[i] = 0.0 if heard == ts else ts - now

    def _reached(self) -> list[tuple[np.ndarray, float]]:
        """Each partition that still holds frames not read yet: its nodes' indices and
        the time it has reached (the consensus of its nodes heard from lately; none heard
        from lately, nothing read from it for a while: of all of them; NaN: none)."""
        step, index = self._step(), self._index
        recent = self._recent(step)
        out = []
        for nodes in self._lanes.values():
            lane = np.array([index[node] for node in nodes if node in index], dtype=int)
            if len(lane):
                # A node whose clock was off when last heard of sets no lane's time: one
                # 10 min behind would hold its partition's other nodes 10 min back, their
                # frames then "ahead" of it and never heard, each paged once caught up.
                lately = lane[recent[lane] & (self._skew[lane] == 0)]
                if not len(lately):
                    lately = lane[recent[lane]]
                out.append((lane, _consensus(self._last[lately if len(lately) else lane],
                                             step)))
        return out

    def _clocks(self, now: float) -> np.ndarray:
        """The time each node is judged at: ``now``, or, for a node whose partition still
        holds frames not read yet, the time that partition has reached (see the class)."""
        clocks = np.full(len(self._where), now)
        for lane, reached in self._reached() if self._lanes else ():
            if reached == reached:
                clocks[lane] = min(now, reached)
        return clocks

    def _step(self) -> float:
        """How far past the nodes' median a node's time may set "now"."""
        known = self._interval[:len(self._where)]
        known = known[~np.isnan(known)]
        usual = float(np.median(known)) if len(known) else 0.0
        return max(self.c.silent_min_s / 2, 2 * usual)


def _consensus(lasts: np.ndarray, step: float) -> float:
    """The newest of ``lasts`` at most ``step`` past their lower median (NaN: none), so
    that a minority of clocks ahead cannot set it (see ``NodeSilence``)."""
    lasts = lasts[~np.isnan(lasts)]
    if not len(lasts):
        return math.nan
    median = float(np.sort(lasts)[(len(lasts) - 1) // 2])
    return float(lasts[lasts <= median + step].max())
