"""The other members' nodes as a rack judge knows them (``rack_silent`` with several
members: ``NodeSilence.share``), read after read of the shared store.

Each node is judged on the time its own partition (``Remote.lane``) has reached in the
store: the newest frame of that partition's nodes there, never later than the judge's own
time. Members catch up a backlog unevenly (all of them restarted after an outage, one
slower than another): a node of a partition still behind is then judged on its own
partition's time, never on another's, as the judge's own nodes are on theirs
(``NodeSilence.behind``). A node whose frames keep moving in the store is heard of: at its
newest frame's time, or, where that is behind the time its partition had reached at the
read before (its clock runs behind: its frames are stored in its partition's order, so it
sent them after that), at that time. A node read for the first time (the judge started,
or the node is new) whose frames have not moved since is ``waiting`` until its partition
has gone a limit past that read: its clock may run behind (as a node taken over by this
member is given a limit to report, ``NodeSilence.expect``). Nodes of a partition stored to
its end (``Remote.settled``) are judged on the judge's time at the read, if later.

Pure logic: no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from fleetwatch.models.node_agents import NodeKey
from fleetwatch.models.rack_silence import Heard, Remote


@dataclass(slots=True)
class _Node:
    ts: float  # its newest frame's time in the store, at the last read
    heard: float  # when it was last heard of, on its partition's time
    first: float | None  # its partition's time when first read, until its frames move


class RemoteNodes:
    """The other members' nodes across store reads (see the module)."""

    def __init__(self) -> None:
        self._nodes: dict[NodeKey, _Node] = {}
        self._lanes: dict[Hashable, float] = {}  # each partition's time at the last read

    def read(self, remote: Sequence[Remote], at: float | None) -> None:
        """A read of the store: the other members' nodes (the judge's own left out), at the
        judge's time ``at`` (None: not known yet)."""
        lanes: dict[Hashable, float] = {}
        for r in remote:
            if r.ts == r.ts:  # NaN: none
                lanes[r.lane] = max(lanes.get(r.lane, -math.inf), r.ts)
        if at is not None:
            lanes = {lane: min(ts, at) for lane, ts in lanes.items()}
        nodes: dict[NodeKey, _Node] = {}
        for r in remote:
            if r.ts != r.ts:
                continue
            key = (r.cluster, r.node)
            old = self._nodes.get(key)
            if old is None:
                nodes[key] = _Node(r.ts, r.ts, lanes[r.lane])
            elif r.ts != old.ts:  # its frames moved: heard of since the last read
                before = min(self._lanes.get(r.lane, -math.inf), lanes[r.lane])
                nodes[key] = _Node(r.ts, max(old.heard, r.ts, before), None)
            else:
                nodes[key] = old
        self._nodes, self._lanes = nodes, lanes

    def quiet(self, nodes: Sequence[Remote], now: float, settled_at: float | None,
              limit: float, strict: bool = False) -> Counter[tuple[str, str]]:
        """How many of each rack's ``nodes`` (of the last read) have sent nothing for half
        ``limit`` at ``now`` (the judge's time), of those not ``waiting`` (``strict``: all),
        the least a node must be quiet to count in a rack down (see ``heard``)."""
        times = self._times(now, settled_at)
        get, half = self._nodes.get, limit / 2
        out: Counter[tuple[str, str]] = Counter()
        for r in nodes:
            n = get((r.cluster, r.node))
            if n is None:
                continue
            at = times[r.settled].get(r.lane, now)
            if at - n.heard >= half and (strict or n.first is None or at - n.first > limit):
                out[(r.cluster, r.rack)] += 1
        return out

    def heard(self, nodes: Sequence[Remote], now: float, settled_at: float | None,
              limit: float, interval: float, strict: bool = False) -> list[Heard]:
        """``nodes`` (of the last read) as the silence detector knows them at ``now`` (the
        judge's time), each with the fleet's usual ``limit`` and ``interval`` (agents share
        a configuration); ``settled_at``: the judge's time at the read, where the nodes of
        settled partitions are judged at it (see the module). ``waiting``: read first and
        not moved since, within a limit of its partition's time then (``strict``: none)."""
        times = self._times(now, settled_at)
        out = []
        for r in nodes:
            n = self._nodes.get((r.cluster, r.node))
            if n is None:
                continue
            at = times[r.settled].get(r.lane, now)
            waiting = not strict and n.first is not None and at - n.first <= limit
            out.append(Heard(r.cluster, r.rack, r.node, n.heard, at - n.heard, limit,
                             waiting, interval))
        return out

    def _times(self, now: float, settled_at: float | None
               ) -> tuple[dict[Hashable, float], dict[Hashable, float]]:
        """The time each partition's nodes are judged at: its own, never later than ``now``;
        where it is settled (the second), the judge's time at the read (``settled_at``), if
        later (its nodes all stopping, the only ones of their partition, stop its time too)."""
        seen = {lane: min(now, ts) for lane, ts in self._lanes.items()}
        if settled_at is None:
            return seen, seen
        return seen, {lane: min(now, max(ts, settled_at)) for lane, ts in seen.items()}
