"""A silent node (no frame for several of its own intervals); with ``NodeAgents``
(node_agents.py), two agents under one name and a node whose NVIDIA driver is away; with
``SilentRacks`` (node_silence_racks.py), the racks whose nodes went silent together.

Silence is judged on the stream's clock, which nodes with wrong clocks cannot move,
never later than the processor's own clock where it passes one (``StreamClock``, node_clock.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, stopped
from fleetwatch.models import Finding, OpenAlert
from fleetwatch.models.node_agents import NodeAgents, NodeKey
from fleetwatch.models.node_clock import StreamClock
from fleetwatch.models.node_forget import FORGET_S, LoneRacks, empty_racks, forgotten_node
from fleetwatch.models.node_silence_racks import SilentRacks
from fleetwatch.models.node_silent import SAID_INTERVAL, learned, silence_limits, silent_node
from fleetwatch.models.node_stopped import RULE as STOPPED_RULE
from fleetwatch.models.node_stopped import agent_stopped
from fleetwatch.models.rack_remote import RemoteNodes
from fleetwatch.models.rack_silence import RULE as RACK_RULE
from fleetwatch.models.rack_silence import Remote, SharedRacks, at_frames


class NodeSilence(SilentRacks, StreamClock):
    """A node that sent no frame for several of its own intervals, on the stream's clock.

    "Now" is the stream's own time, never the wall clock alone, so replays and
    simulations that run faster than real time are judged as they happened. But a few
    nodes whose clocks are wrong (two agents 2 h ahead, one frame stamped 2099) must
    not move it: "now" is a consensus of the nodes heard from lately: the newest of
    their latest times that is at most ``step`` (``silent_min_s`` / 2, or two of the
    fleet's usual intervals) past their lower median. A minority ahead is above that,
    one behind below it. Heard from lately (``StreamClock``): live, a node whose last
    frame arrived within ``step`` of the time the processor has spent listening; in a
    replay, among the senders of the last ``2 x nodes`` frames. A node that died leaves
    the set, so that even most of the fleet dying (a hall's power, a few nodes left on
    a UPS) does not stop the clock. Where there is a wall clock (a live processor
    passes its own as ``wall``), "now" is never later than it: no alert is ever
    stamped in the future.

    Each node is judged on when it was last heard of: its frame's time when that is
    within its silence limit of "now" (the exact time, as it reported); "now" itself
    when the frame was ahead of "now", or further behind than that and behind every
    frame of the batch's nodes in step (its clock is wrong, or a spool flushes old
    frames: either way it is arriving, which is a clock problem, not a silent node).
    A node whose clock runs ahead is therefore reported silent a limit after its last
    frame arrived, not when "now" reaches its clock. A jump of
    "now" by more than ``step`` ends a pause of the whole fleet (a replay's gap, an
    outage of the brokers): it counts against none of the nodes heard from lately.

    When no frame at all arrives (a site's power lost, the agents' path to the brokers
    cut, the one node of a small deployment dead), the stream's clock stands still: a
    live processor then calls ``tick`` with its own clock on the polls that bring
    nothing, and once it has heard nothing for ``step``, silence is judged on "now" plus
    the time it has been listening to nothing. Only time spent listening counts (a
    processor stopped itself, then resuming with a backlog, pages nobody for its own
    pause), and a node this processor has not heard yet (a start, a partition taken
    over) is given a limit from then to report before it is judged.

    A processor catching up a backlog (restarted after an outage, a partition taken
    over) reads its partitions unevenly: one may be minutes ahead of another, and "now"
    is the leading ones' time. A node whose partition still holds frames not read yet
    (``behind``: the processor knows it from the brokers) is judged on the time its own
    partition has reached (the same consensus over that partition's nodes heard from
    lately), never later than "now": its frames of the meantime are on their way. Once
    its partition has caught up it is judged on "now" again, so a node that died while
    the processor was away is paged then.
    """

    name = "node_silent"
    rules: dict[str, tuple[str, ...]] = {"node_silent": (), "node_name_conflict": (),
                                         "node_nvml_down": (), RACK_RULE: (),
                                         STOPPED_RULE: ()}
    uses_wall = True  # the processor passes its clock to ``update`` (live frames only)

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self.now = -math.inf
        self._index: dict[NodeKey, int] = {}
        self._where: list[tuple[str, str, str]] = []
        self._last = np.full(64, np.nan)      # the newest frame time, on the node's clock
        self._heard = np.full(64, np.nan)     # when it was last heard of, on "now"'s clock
        self._seq = np.full(64, -np.inf)      # the arrival count at its newest frame
        self._came = np.full(64, np.nan)      # ``_listen`` then (NaN: not come live)
        self._skew = np.zeros(64)             # how far off its clock was when last heard of
        self._interval = np.full(64, np.nan)
        self._arrived = 0                     # frames seen so far
        self._gone = 0                        # nodes silent or stopped when last judged
        self._long = np.zeros(64, dtype=bool)  # its last gap was an outage (not learned)
        # Its newest frame said its agent stopped cleanly (``frame.stopped``): not paged.
        self._stopped = np.zeros(64, dtype=bool)
        # Nodes this processor took over and has not heard yet: when first judged ("now");
        # NaN until then. Their last frame's time came from the store (``expect``).
        self._taken: dict[int, float] = {}
        # The live processor's clock at its last tick or frame, how long it has heard no
        # frame at all while listening, and "now" when that began (``tick``).
        self._tick_wall: float | None = None
        self._listen = 0.0                    # time spent listening (``_listened``)
        self._quiet = 0.0
        self._quiet_from: float | None = None
        # The clusters this processor has frames from: a node the store names (``expect``)
        # of another cluster is another cluster's processors' to judge (one store can hold
        # several clusters, each with its own topic).
        self._clusters: set[str] = set()
        # Who reports as each node: two machines under one name, a driver away.
        self._agents = NodeAgents()
        # Nodes whose partition still holds frames not read yet, by partition (``behind``).
        self._lanes: dict[Hashable, list[NodeKey]] = {}
        # Names forgotten (``FORGET_S``) in every cluster, not yet taken (``retired``): the
        # processor drops the rest of their per-node state.
        self._retired: set[str] = set()
        # Rack alerts taken over of racks no node of which is known here (``adopt``).
        self._lone = LoneRacks()
        # Every rack is judged (``rack_silent``) where every node of a rack is this
        # processor's to see (``whole``): no bus, or every partition of its topic; else
        # only the racks it is the judge of (``share``).
        self._whole = True
        # With several members: which racks this one judges, the other members' nodes of
        # them as the store has them (None: the store cannot be read), the findings kept.
        self._judges: Callable[[str, str], bool] | None = None
        self._remote: list[Remote] | None = []
        self._shared = SharedRacks()
        # The clusters whose racks it judges beside those it has frames from: those the
        # configuration names (``share``).
        self._named: frozenset[str] = frozenset()
        self._settled_at: float | None = None
        self._far = RemoteNodes()

    def drop(self, nodes: Iterable[str | NodeKey]) -> None:
        """Forget nodes: (cluster, node) pairs, or names (that name in every cluster: the
        bus keys frames by name, so same-named nodes move between processors together)."""
        gone = set(nodes)
        drop = [self._index[k] for k in self._index if k in gone or k[1] in gone]
        if drop:
            self._remove(drop)

    def _remove(self, drop: list[int]) -> None:
        """Remove nodes ``drop`` (indices) from every array and map: a node forgotten or
        moved to another processor costs nothing more here."""
        n = len(self._where)
        keep = np.ones(n, dtype=bool)
        keep[drop] = False
        for i in drop:
            self._agents.drop(self._where[i][::2])
        renumber = np.cumsum(keep) - 1
        self._where = [w for w, k in zip(self._where, keep.tolist(), strict=True) if k]
        self._index = {(c, node): i for i, (c, _, node) in enumerate(self._where)}
        self._taken = {int(renumber[i]): t for i, t in self._taken.items() if keep[i]}
        size = max(64, len(self._last))
        for name, fill in (("_last", np.nan), ("_heard", np.nan), ("_seq", -np.inf),
                           ("_came", np.nan), ("_skew", 0.0), ("_interval", np.nan),
                           ("_long", False), ("_stopped", False)):
            old = getattr(self, name)
            new = np.full(size, fill, dtype=old.dtype)
            kept = old[:n][keep]
            new[:len(kept)] = kept
            setattr(self, name, new)

    def expect(self, nodes: Iterable[tuple[str, str, str, float]
                                     | tuple[str, str, str, float, bool]]) -> None:
        """Nodes this processor now owns but has no frame from: (cluster, rack, node,
        their last frame's time, from the store, and whether that frame said its agent
        stopped cleanly). One that sends nothing more is reported once it has been silent
        for long enough; one stopped cleanly stays stopped (not paged, not in a rack)."""
        for e in nodes:
            cluster, rack, node, ts = e[0], e[1], e[2], e[3]
            i = self._index.get((cluster, node))
            if i is None:
                i = self._add_node(cluster, rack, node)
            if self._seq[i] == -np.inf:  # not heard by this processor yet: from now on
                self._taken.setdefault(i, self.now if self.now > -math.inf else math.nan)
            if not self._last[i] >= ts:
                self._last[i] = ts
                self._stopped[i] = len(e) > 4 and bool(e[4])
            if not self._heard[i] >= ts:
                self._heard[i] = ts

    def update(self, frames: Sequence[Frame], wall: float | None = None) -> list[Finding]:
        """Findings at the time of these frames; ``wall``: the processor's own clock
        (None in a replay or a simulation, judged on stream time alone)."""
        if not frames:
            return []
        if self._quiet_from is not None:
            # It was judged on this processor's clock while nothing came: the time it
            # listened to nothing was real time, not a replay's gap to forgive.
            self.now = max(self.now, self._quiet_from + self._quiet)
        self._quiet, self._quiet_from = 0.0, None  # frames: the fleet is not quiet
        if wall is not None:
            self._listened(wall)
            self._tick_wall = wall
        span: dict[int, tuple[float, float]] = {}  # node -> its oldest, newest frame here
        for f in frames:
            key = (f.cluster, f.node)
            i = self._index.get(key)
            if i is None:
                i = self._add(f)
            self._arrived += 1
            seeded = self._taken.pop(i, None) is not None  # its last time: the store's
            self._seq[i] = self._arrived
            if wall is not None:
                self._came[i] = self._listen
            self._clusters.add(f.cluster)
            prev = self._last[i]
            said = f.host.metrics.get(SAID_INTERVAL)
            if said is not None and said > 0:
                # Its agent says its pace (a slower one is not an outage to learn twice).
                self._interval[i], self._long[i] = min(said, 3600.0), False
            elif prev == prev and f.ts > prev and not seeded:   # not NaN
                self._learn(i, min(f.ts - prev, 3600.0))
            if not prev >= f.ts:
                self._last[i] = f.ts
            # Its latest word as frames arrive (in its partition's order), whatever their
            # stamps: a stop stamped ahead (its clock stepped back since, another client's
            # frame) ends with its next frame, so that it is paged when it dies.
            self._stopped[i] = stopped(f)
            oldest, newest = span.get(i, (f.ts, f.ts))
            span[i] = (min(oldest, f.ts), max(newest, f.ts))
            self._where[i] = (f.cluster, f.rack, f.node)
            self._agents.see(f)
        self._advance(wall, list(span))
        self._hear(span)
        return at_frames(self._judge(self.now), frames) + self._agents.findings(frames)

    def deaf(self) -> None:
        """The processor cannot hear (its brokers are away, hang, or its group rebalances):
        the time from its last tick or frame until its next tick is not time it listened
        to nothing, however short (a gap of up to ``TICK_GAP_S`` would otherwise count)."""
        self._tick_wall = None

    def tick(self, wall: float) -> list[Finding]:
        """Findings when no frame has arrived since the last call (a live processor's poll
        that brought nothing); ``wall``: the processor's clock (see the class), as of
        the brokers' last answer (it may be behind the last frame's: never counted twice)."""
        self._quiet += self._listened(wall)  # at most TICK_GAP_S (node_clock.py)
        last = self._tick_wall
        self._tick_wall = wall if last is None else max(last, wall)
        # A rack judge left with no node of its own (a rebalance gave every node of a
        # small fleet to the other members) gets no frame: only its ticks judge its racks,
        # else their open alerts would never resolve, nor new ones be raised.
        judging = not self._whole and self._judges is not None and bool(
            self._shared.down or self._remote)
        if not (self._where or judging) or self._quiet < self._step():
            return []
        if self._quiet_from is None:
            # Stream time and this clock may differ (a lag, the nodes' clocks): the
            # stream's "now" goes on at this clock's pace. Nothing heard ever: this clock.
            self._quiet_from = self.now if self.now > -math.inf else wall - self._quiet
        return self._judge(min(self._quiet_from + self._quiet, wall))

    def _time(self) -> float | None:
        """The time it judges at now (None: not known yet): the stream's, or while it hears
        nothing, that plus the time it has listened (``tick``)."""
        if self._quiet_from is not None:
            at = self._quiet_from + self._quiet
            return at if self._tick_wall is None else min(at, self._tick_wall)
        return self.now if self.now > -math.inf else None

    def _learn(self, i: int, gap: float) -> None:
        """Learn node ``i``'s interval from a ``gap`` between two of its frames
        (``node_silent.learned``)."""
        self._interval[i], self._long[i] = learned(self._interval[i], bool(self._long[i]), gap)

    def _limits(self) -> np.ndarray:
        """Each node's silence limit (``node_silent.silence_limits``)."""
        return silence_limits(self._interval[:len(self._where)], self.c)

    def _add(self, f: Frame) -> int:
        return self._add_node(f.cluster, f.rack, f.node)

    def _add_node(self, cluster: str, rack: str, node: str) -> int:
        i = self._index[(cluster, node)] = len(self._where)
        self._where.append((cluster, rack, node))
        if i >= len(self._last):
            grow = len(self._last)
            self._last = np.concatenate([self._last, np.full(grow, np.nan)])
            self._heard = np.concatenate([self._heard, np.full(grow, np.nan)])
            self._seq = np.concatenate([self._seq, np.full(grow, -np.inf)])
            self._came = np.concatenate([self._came, np.full(grow, np.nan)])
            self._skew = np.concatenate([self._skew, np.zeros(grow)])
            self._interval = np.concatenate([self._interval, np.full(grow, np.nan)])
            self._long = np.concatenate([self._long, np.zeros(grow, dtype=bool)])
            self._stopped = np.concatenate([self._stopped, np.zeros(grow, dtype=bool)])
        return i

    def _judge(self, now: float) -> list[Finding]:
        n = len(self._where)
        clocks = self._clocks(now)
        gap = clocks - self._heard[:n]
        limits = self._limits()
        for i, taken in self._taken.items():
            if taken != taken:  # judged for the first time since it was taken over
                self._taken[i] = float(clocks[i])
        with np.errstate(invalid="ignore"):
            # A node whose agent said it stopped (a scale-down) is not silent: it left.
            silent = (gap > limits) & (gap < FORGET_S) & ~self._stopped[:n]
            self._gone = int(np.count_nonzero((gap > limits) | self._stopped[:n]))
            forgotten = np.flatnonzero(gap >= FORGET_S).tolist()
        out = [forgotten_node(*self._where[i], float(clocks[i]), float(gap[i]))
               for i in forgotten if self._where[i][0] in self._clusters]
        for i in np.flatnonzero(silent).tolist():
            cluster, rack, node = self._where[i]
            at = float(clocks[i])
            if cluster not in self._clusters or self._grace(i, at, float(limits[i])):
                continue
            out.append(silent_node(
                cluster, rack, node, at, float(gap[i]), float(self._interval[i]),
                float(self._skew[i]), float(self._last[i]),
                float(self._heard[i] + limits[i]), i in self._taken))
        out += self._stopped_long(clocks, gap, limits)
        if self._whole:
            if any(f.rule == "node_silent" and not f.resolves for f in out):
                racks = self._racks(now, clocks, gap, limits)
                # Kept should a second member join: this one, still the rack's judge,
                # then resolves it even if it reads none of the rack's frames any more.
                self._shared.down.update(((f.cluster, f.rack), f) for f in racks)
                out += racks
        elif self._judges is not None:
            out += self._shared_racks(now, clocks, gap, limits)
        if forgotten:
            names = {self._where[i][2] for i in forgotten}
            places = {self._where[i][:2]: float(clocks[i]) for i in forgotten}
            self._remove(forgotten)
            self._retired |= names - {node for _, node in self._index}
            if self._whole:  # else another processor may hear some of a rack's nodes
                out += empty_racks(places, [w[:2] for w in self._where], self._clusters)
        if self._lone and self._whole:
            out += self._lone.due(now, [w[:2] for w in self._where], self._clusters)
        return out

    def _stopped_long(self, clocks: np.ndarray, gap: np.ndarray,
                      limits: np.ndarray) -> list[Finding]:
        """``agent_stopped`` of the nodes stopped cleanly and not back within
        ``agent_stopped_grace_s`` (none where it is 0), until they are forgotten."""
        grace, n = self.c.agent_stopped_grace_s, len(self._where)
        if grace <= 0:
            return []
        with np.errstate(invalid="ignore"):
            late = np.flatnonzero(self._stopped[:n] & (gap > grace) & (gap < FORGET_S))
        out = []
        for i in late.tolist():
            cluster, rack, node = self._where[i]
            at = float(clocks[i])
            if cluster not in self._clusters or self._grace(i, at, float(limits[i])):
                continue
            # Stopped when heard of stopping: never a stamp ahead of the stream's clock.
            out.append(agent_stopped(cluster, rack, node, at,
                                     float(min(self._last[i], self._heard[i])),
                                     float(gap[i]), float(self._heard[i]) + grace))
        return out

    def adopt(self, alerts: Iterable[OpenAlert]) -> None:
        """Open alerts taken over (a restart, a partition): a rack alert of a rack no node
        of which is known here ends once it is forgotten (``LoneRacks``); with several
        members, a ``rack_silent`` one is resolved by its judge once its rack is found up
        (the judge may read none of the rack's frames itself)."""
        alerts = list(alerts)
        self._lone.adopt(alerts)
        for a in alerts:
            if a.rule == RACK_RULE and a.state != "resolved" and a.device.startswith("rack:"):
                self._shared.adopt(a.cluster, a.device[5:])
                # Its cluster is one this member judges, though it may have no node of it
                # (every node maps to another member's partition): the store's nodes of it
                # are read, not left out as another deployment's.
                self._clusters.add(a.cluster)

    def retired(self) -> set[str]:
        """The node names forgotten since the last call (no frame for ``FORGET_S``, in any
        cluster): the processor drops their state everywhere else."""
        out, self._retired = self._retired, set()
        return out

    def _grace(self, i: int, now: float, limit: float) -> bool:
        """Is node ``i`` one taken over and not heard yet, whose limit from when it was
        first judged has not passed? (Its frames may be on their way: a spool flushed
        after the brokers were away, a backlog behind a rebalance.)"""
        taken = self._taken.get(i)
        return taken is not None and now - taken <= limit

