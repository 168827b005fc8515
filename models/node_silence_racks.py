"""The rack side of ``NodeSilence`` (node_silence.py): which racks' nodes went silent
together (``rack_silent``, judged by ``rack_silence``), and with several processors, which
one judges a rack, on its own nodes of it and the others' as the store has them.

A mixin of ``NodeSilence``, which holds the per-node arrays and the rack state it reads.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.models import Finding
from fleetwatch.models.node_agents import NodeKey
from fleetwatch.models.node_forget import FORGET_S
from fleetwatch.models.rack_remote import RemoteNodes
from fleetwatch.models.rack_silence import (
    Heard,
    Remote,
    SharedRacks,
    judged_clusters,
    racks_down,
)


class SilentRacks:
    """Racks whose nodes went silent together, judged here where every node of a rack is
    this processor's to see (``whole``), else only by the member that is the rack's judge
    (``share``); rack alerts taken over (``NodeSilence.adopt``) are resolved by it."""

    # NodeSilence's settings and nodes, read here.
    c: DetectorsConfig
    _index: dict[NodeKey, int]
    _where: list[tuple[str, str, str]]
    _clusters: set[str]
    _heard: np.ndarray
    _interval: np.ndarray
    _stopped: np.ndarray
    # The rack state (made in NodeSilence.__init__; its _judge and adopt use it too).
    _whole: bool
    _judges: Callable[[str, str], bool] | None
    _remote: list[Remote] | None
    _shared: SharedRacks
    _named: frozenset[str]  # the clusters the configuration names (``share``)
    _settled_at: float | None  # this member's time at the last read (``share``)
    _far: RemoteNodes  # the other members' nodes, read after read (``share``)

    if TYPE_CHECKING:  # in NodeSilence
        def _grace(self, i: int, now: float, limit: float) -> bool: ...
        def _time(self) -> float | None: ...

    def whole(self, every: bool) -> None:
        """Does this processor read every partition of its topic (or no bus at all)? Then
        every node of a rack is its own, and every rack is judged here (``rack_silent``).
        With several processors, each sees some of a rack's nodes: a rack is judged only
        by its one judge (``share``), never on a part by each."""
        self._whole = every

    def share(self, judges: Callable[[str, str], bool],
              remote: Sequence[Remote] | None, clusters: Collection[str] = (),
              window: float | None = None) -> None:
        """With several members: which racks ((cluster, rack)) this one judges, and the
        last frame times the store holds of their nodes that other members read (None:
        the store cannot be read now: the racks' last findings are held). ``clusters``:
        those the processor's configuration names as its deployment's (``node.cluster``
        where set, ``alerts.clusters``): their racks are judged here though no frame of them came
        here (``rack_silence.judged_clusters``). ``window``: the oldest frame time the
        read could return (a short read's): nodes of settled partitions are judged at this
        member's time only where it is within it, else a frame stamped earlier, stored
        since the last read, would not be seen (a stream running behind the clock)."""
        self._judges = judges
        self._named = frozenset(clusters)
        # This member's time at the read: the settled partitions' nodes are judged at it.
        if remote is not None:
            at = self._time()
            self._settled_at = at if at is not None and (window is None or at >= window) \
                else None
        if remote is not None:
            # Each other member's node heard of as its frames move in the store, judged on
            # its own partition's time (``rack_remote``).
            self._far.read([r for r in remote if (r.cluster, r.node) not in self._index],
                           self._time())
        # Only the judged racks' (the judge changes only with a read: once a read, not a batch).
        self._remote = None if remote is None else [r for r in remote if judges(r.cluster, r.rack)]

    def _shared_racks(self, now: float, clocks: np.ndarray, gap: np.ndarray,
                      limits: np.ndarray) -> list[Finding]:
        """With several members: the racks this one judges, on its own nodes of them and
        the other members' as the store has them (``rack_silence.SharedRacks``)."""
        judges = self._judges
        assert judges is not None
        if self._remote is None:
            return self._shared.judge(None, judges, now)
        n = len(self._where)
        known = self._interval[:n][~np.isnan(self._interval[:n])]
        usual = float(np.median(known)) if len(known) else math.nan
        limit = float(np.median(limits)) if n else self.c.silent_min_s
        # The group's clusters, not only those this member has had frames from: a small
        # cluster named by the configuration whose nodes all map to other members'
        # partitions has its racks judged here all the same; another deployment's, sharing
        # only the store, is left alone.
        clusters = self._judged_clusters()
        remote = [r for r in self._remote if r.cluster in clusters
                  and (r.cluster, r.node) not in self._index and now - r.ts < FORGET_S]
        # The others' nodes are judged on the time their own partition has reached in the
        # store, not on this member's clock nor on another partition's: a view that lags (a
        # store read every few seconds, members catching up a backlog unevenly, a store
        # away) makes no rack silent (``rack_remote``).
        far, at = self._far, self._settled_at

        def others(racks: Collection[tuple[str, str]], strict: bool = False) -> list[Heard]:
            return far.heard([r for r in remote if (r.cluster, r.rack) in racks], now, at,
                             limit, usual, strict)
        found = self._racks(now, clocks, gap, limits,
                            (far.quiet(remote, now, at, limit), others), judges)
        # A rack down (or its alert taken over) whose other nodes are read for the first
        # time and have not moved since (this member started): held down as their frames
        # say until they move or a limit passes, neither resolved nor raised again.
        held = set(self._shared.down) - {(f.cluster, f.rack) for f in found}
        if held and any(h.waiting for h in others(held)):
            strict = [r for r in remote if (r.cluster, r.rack) in held]
            found += [f for f in self._racks(
                now, clocks, gap, limits,
                (far.quiet(strict, now, at, limit, True), partial(others, strict=True)),
                judges) if (f.cluster, f.rack) in held]
        return self._shared.judge(found, judges, now)

    def _judged_clusters(self) -> set[str]:
        """With several members: the clusters whose racks this one judges."""
        return judged_clusters(self._clusters, self._named)

    def _racks(self, now: float, clocks: np.ndarray, gap: np.ndarray, limits: np.ndarray,
               others: tuple[Counter[tuple[str, str]],
                             Callable[[Collection[tuple[str, str]]], list[Heard]]] | None
               = None, judges: Callable[[str, str], bool] | None = None) -> list[Finding]:
        """The racks whose nodes went silent together (``rack_silence``), of the nodes of
        this processor's clusters heard of in the last ``FORGET_S`` and the other members'
        (``others``: how many of each rack's are quiet, and those of given racks as
        ``Heard``). Only racks with ``rack_silent_min_nodes`` nodes quiet for half their
        limit can be: the others' nodes are not looked at (a fleet of 2,000 with one node
        down: 17 ms a batch)."""
        with np.errstate(invalid="ignore"):
            quiet = np.flatnonzero((gap >= limits / 2) & (gap < FORGET_S)
                                   & ~self._stopped[:len(gap)]).tolist()
        counts = Counter(self._where[i][:2] for i in quiet)
        if others is not None:
            counts.update(others[0])
        clusters = self._clusters if judges is None else self._judged_clusters()
        racks = {r for r, k in counts.items() if k >= self.c.rack_silent_min_nodes
                 and (judges is None or judges(*r))}
        if not racks:
            return []
        heard = [] if others is None else others[1](racks)
        for i, (cluster, rack, node) in enumerate(self._where):
            if ((cluster, rack) in racks and cluster in clusters and gap[i] < FORGET_S
                    and not self._stopped[i]):
                limit = float(limits[i])
                heard.append(Heard(cluster, rack, node, float(self._heard[i]), float(gap[i]),
                                   limit, self._grace(i, float(clocks[i]), limit),
                                   float(self._interval[i])))
        return racks_down(heard, now, self.c)
