"""A silent node (no frame for several of its own intervals); with ``NodeAgents``
(node_agents.py), two agents under one name and a node whose NVIDIA driver is away.

Silence is judged on the stream's clock, which nodes with wrong clocks cannot move,
never later than the processor's own clock where it passes one.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, stopped
from fleetwatch.models import KEEP_FIRING, Finding, OpenAlert
from fleetwatch.models.node_agents import NodeAgents, NodeKey
from fleetwatch.models.rack_silence import RULE as RACK_RULE
from fleetwatch.models.rack_silence import (
    Heard,
    Remote,
    SharedRacks,
    at_frames,
    racks_down,
    remote_heard,
)

# A node silent this long is forgotten (decommissioned, scaled down, renamed): its open
# alert resolves (``Finding.resolves``), saying so, and its state here is dropped.
FORGET_S = 7 * 86400.0
# A gap longer than this many of a node's intervals is an outage, not a sample of its
# interval (a node that dies again soon after must be paged as soon as the first time);
# two such gaps in a row are an agent that now reports this slowly.
OUTAGE_INTERVALS = 3.0
# The host metric in which an agent's frames say its own interval (``agent.interval_s``):
# where it is, the node is judged on it, not on the gaps learned (older agents').
SAID_INTERVAL = "host_agent_interval_s"
# Between two ticks of a live processor that hears nothing, at most this much of its
# clock counts as time the fleet was quiet: longer, the processor itself was stopped
# (SIGSTOP, a long pause, stuck joining its group), not listening.
TICK_GAP_S = 5.0


class NodeSilence:
    """A node that sent no frame for several of its own intervals, on the stream's clock.

    "Now" is the stream's own time, never the wall clock alone, so replays and
    simulations that run faster than real time are judged as they happened. But a few
    nodes whose clocks are wrong (two agents 2 h ahead, one frame stamped 2099) must
    not move it: "now" is a consensus of the nodes heard from lately (those among the
    last ``2 x nodes`` frames to arrive): the newest of their latest times that is at
    most ``step`` (``silent_min_s`` / 2, or two of the fleet's usual intervals) past
    their lower median. A minority ahead is above that, one behind below it; a node
    that died leaves the set once the others have sent that many frames, so that even
    most of the fleet dying does not stop the clock. Where there is a wall clock (a
    live processor passes its own as ``wall``), "now" is never later than it: no alert
    is ever stamped in the future.

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
                                         "node_nvml_down": (), RACK_RULE: ()}
    uses_wall = True  # the processor passes its clock to ``update`` (live frames only)

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self.now = -math.inf
        self._index: dict[NodeKey, int] = {}
        self._where: list[tuple[str, str, str]] = []
        self._last = np.full(64, np.nan)      # the newest frame time, on the node's clock
        self._heard = np.full(64, np.nan)     # when it was last heard of, on "now"'s clock
        self._seq = np.full(64, -np.inf)      # the arrival count at its newest frame
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
        # Every rack is judged (``rack_silent``) where every node of a rack is this
        # processor's to see (``whole``): no bus, or every partition of its topic; else
        # only the racks it is the judge of (``share``).
        self._whole = True
        # With several members: which racks this one judges, the other members' nodes of
        # them as the store has them (None: the store cannot be read), the findings kept.
        self._judges: Callable[[str, str], bool] | None = None
        self._remote: list[Remote] | None = []
        self._shared = SharedRacks()

    def whole(self, every: bool) -> None:
        """Does this processor read every partition of its topic (or no bus at all)? Then
        every node of a rack is its own, and every rack is judged here (``rack_silent``).
        With several processors, each sees some of a rack's nodes: a rack is judged only
        by its one judge (``share``), never on a part by each."""
        self._whole = every

    def share(self, judges: Callable[[str, str], bool],
              remote: Sequence[Remote] | None) -> None:
        """With several members: which racks ((cluster, rack)) this one judges, and the
        last frame times the store holds of their nodes that other members read (None:
        the store cannot be read now: the racks' last findings are held)."""
        self._judges = judges
        # Only the judged racks' (the judge changes only with a read: once a read, not a batch).
        self._remote = None if remote is None else [r for r in remote if judges(r.cluster, r.rack)]

    def adopt(self, alerts: Iterable[OpenAlert]) -> None:
        """Open alerts taken over: a ``rack_silent`` one is resolved here once its rack is
        found up (this member may read none of the rack's frames itself)."""
        for a in alerts:
            if a.rule == RACK_RULE and a.state != "resolved" and a.device.startswith("rack:"):
                self._shared.adopt(a.cluster, a.device[5:])

    def behind(self, nodes: Mapping[NodeKey, Hashable]) -> None:
        """Which nodes' partitions still hold frames not read yet ((cluster, node) ->
        partition), as of the poll that brought the next batch; an empty mapping: every
        partition has been read to its end. Judged on their partition's own time until then."""
        lanes: dict[Hashable, list[NodeKey]] = {}
        for node, lane in nodes.items():
            lanes.setdefault(lane, []).append(node)
        self._lanes = lanes

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
                           ("_skew", 0.0), ("_interval", np.nan), ("_long", False),
                           ("_stopped", False)):
            old = getattr(self, name)
            new = np.full(size, fill, dtype=old.dtype)
            kept = old[:n][keep]
            new[:len(kept)] = kept
            setattr(self, name, new)

    def expect(self, nodes: Iterable[tuple[str, str, str, float]]) -> None:
        """Nodes this processor now owns but has no frame from: (cluster, rack, node,
        their last frame's time, from the store). One that sends nothing more is
        reported once it has been silent for long enough."""
        for cluster, rack, node, ts in nodes:
            i = self._index.get((cluster, node))
            if i is None:
                i = self._add_node(cluster, rack, node)
            if self._seq[i] == -np.inf:  # not heard by this processor yet: from now on
                self._taken.setdefault(i, self.now if self.now > -math.inf else math.nan)
            if not self._last[i] >= ts:
                self._last[i] = ts
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
        last = self._tick_wall
        self._tick_wall = wall if last is None else max(last, wall)
        if last is not None:
            self._quiet += min(max(wall - last, 0.0), TICK_GAP_S)
        if not self._where or self._quiet < self._step():
            return []
        if self._quiet_from is None:
            # Stream time and this clock may differ (a lag, the nodes' clocks): the
            # stream's "now" goes on at this clock's pace. Nothing heard ever: this clock.
            self._quiet_from = self.now if self.now > -math.inf else wall - self._quiet
        return self._judge(min(self._quiet_from + self._quiet, wall))

    def _learn(self, i: int, gap: float) -> None:
        """Learn node ``i``'s interval from a ``gap`` between two of its frames: a moving
        average, but an outage (over ``OUTAGE_INTERVALS`` of it) is not learned, unless
        it is the second in a row (the agent now reports this slowly)."""
        iv = self._interval[i]
        long = bool(iv == iv and gap > OUTAGE_INTERVALS * iv)
        if iv != iv or (long and self._long[i]):
            self._interval[i] = gap
        elif not long:
            self._interval[i] = iv + 0.1 * (gap - iv)
        self._long[i] = long and not self._long[i]

    def _recent(self) -> np.ndarray:
        """The nodes among the senders of the last ``2 x nodes`` frames to arrive, of the
        nodes not judged silent or stopped when last judged: on a pool that scales, the
        names gone (held up to ``FORGET_S``) would widen the window to hours of frames and
        their old last frames hold "now" back."""
        n = len(self._where)
        return self._seq[:n] > self._arrived - 2 * max(1, n - self._gone)

    def _advance(self, wall: float | None, batch: list[int]) -> None:
        """Move "now" to the consensus of the nodes heard from lately (see the class)."""
        n, step, prev = len(self._where), self._step(), self.now
        recent = self._recent()
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
        recent, step, index = self._recent(), self._step(), self._index
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

    def _limits(self) -> np.ndarray:
        """Each node's silence limit: ``silent_intervals`` of its interval, at least
        ``silent_min_s``. A node whose interval is not known yet (one frame, or none since
        this processor took it over) is given the fleet's usual one: agents share a
        configuration."""
        n, c = len(self._where), self.c
        known = self._interval[:n][~np.isnan(self._interval[:n])]
        usual = float(np.median(known)) if len(known) else c.silent_min_s / c.silent_intervals
        return np.maximum(c.silent_min_s, c.silent_intervals * np.nan_to_num(
            self._interval[:n], nan=usual))

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
        out = self._forgotten(forgotten, clocks, gap) if forgotten else []
        for i in np.flatnonzero(silent).tolist():
            cluster, rack, node = self._where[i]
            at = float(clocks[i])
            if cluster not in self._clusters or self._grace(i, at, float(limits[i])):
                continue
            interval, skew = self._interval[i], float(self._skew[i])
            how = (f"it reports every {interval:.0f} s" if interval == interval else
                   f"its last frame: {_utc(self._last[i])}")
            if skew:  # its frames were not in step with the fleet's when last heard of
                how += f"; its clock was {_offset(skew)} of the fleet's"
            evidence = {"silent_s": round(float(gap[i]), 1), KEEP_FIRING: 0.0}
            if interval == interval:  # not known (none learned since a start): not said as 0
                evidence["interval_s"] = round(float(interval), 2)
            out.append(Finding(
                "node_silent", cluster, rack, node, None, at, float(gap[i]),
                f"{node} has sent nothing for {gap[i]:.0f} s ({how})", "critical", 0.0, 0.0,
                # Ends with the node's first frame back, not alerts.keep_firing_s later
                # (that is for readings hovering at a limit): a node that sends is not
                # silent, and the fleet page would count it silent meanwhile.
                evidence,
                "Check the node: is it up, is its agent running (systemctl status "
                "fleetwatch-agent), can it reach the brokers?", "node",
                # Silent since its limit passed, as a processor watching then would have
                # said: one that starts later (a restart, a partition taken over) finds a
                # node down for hours, not one that went down at its detection.
                since=float(self._heard[i] + limits[i])))
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
            self._remove(forgotten)
            self._retired |= names - {node for _, node in self._index}
        return out

    def retired(self) -> set[str]:
        """The node names forgotten since the last call (no frame for ``FORGET_S``, in any
        cluster): the processor drops their state everywhere else."""
        out, self._retired = self._retired, set()
        return out

    def _forgotten(self, nodes: list[int], clocks: np.ndarray, gap: np.ndarray) -> list[Finding]:
        """Nodes not heard of for ``FORGET_S``: no longer judged (their state is dropped
        after this judgement), so each one's open ``node_silent`` alert is resolved now,
        saying why (``Finding.resolves``), rather than left open for ever."""
        out = []
        for i in nodes:
            cluster, rack, node = self._where[i]
            if cluster not in self._clusters or self._stopped[i]:  # none open: it stopped
                continue
            out.append(Finding(
                "node_silent", cluster, rack, node, None, float(clocks[i]), float(gap[i]),
                f"no frame for {FORGET_S / 86400:.0f} days: forgotten (its alert ends here; "
                f"{node} is not back)", "critical",
                evidence={"silent_s": round(float(gap[i]), 1), "forgotten": 1.0},
                action="Nothing, if it was retired; if it should run, start its agent: its "
                       "first frame makes it known again", scope="node", resolves=True))
        return out

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
        remote = [r for r in self._remote if r.cluster in self._clusters
                  and (r.cluster, r.node) not in self._index and now - r.ts < FORGET_S]
        found = self._racks(now, clocks, gap, limits, (remote, limit, usual), judges)
        return self._shared.judge(found, judges, now)

    def _racks(self, now: float, clocks: np.ndarray, gap: np.ndarray, limits: np.ndarray,
               remote: tuple[Sequence[Remote], float, float] = ((), 0.0, 0.0),
               judges: Callable[[str, str], bool] | None = None) -> list[Finding]:
        """The racks whose nodes went silent together (``rack_silence``), of the nodes of
        this processor's clusters heard of in the last ``FORGET_S``. Only racks with
        ``rack_silent_min_nodes`` nodes quiet for half their limit can be: the others'
        nodes are not looked at (a fleet of 2,000 with one node down: 17 ms a batch)."""
        with np.errstate(invalid="ignore"):
            quiet = np.flatnonzero((gap >= limits / 2) & (gap < FORGET_S)
                                   & ~self._stopped[:len(gap)]).tolist()
        counts = Counter(self._where[i][:2] for i in quiet)
        others, limit, usual = remote  # other members' nodes: the fleet's usual limit
        counts.update((r.cluster, r.rack) for r in others if now - r.ts >= limit / 2)
        racks = {r for r, k in counts.items() if k >= self.c.rack_silent_min_nodes
                 and (judges is None or judges(*r))}
        if not racks:
            return []
        heard = remote_heard((r for r in others if (r.cluster, r.rack) in racks), now, limit,
                             usual)
        for i, (cluster, rack, node) in enumerate(self._where):
            if ((cluster, rack) in racks and cluster in self._clusters and gap[i] < FORGET_S
                    and not self._stopped[i]):
                limit = float(limits[i])
                heard.append(Heard(cluster, rack, node, float(self._heard[i]), float(gap[i]),
                                   limit, self._grace(i, float(clocks[i]), limit),
                                   float(self._interval[i])))
        return racks_down(heard, now, self.c)

    def _grace(self, i: int, now: float, limit: float) -> bool:
        """Is node ``i`` one taken over and not heard yet, whose limit from when it was
        first judged has not passed? (Its frames may be on their way: a spool flushed
        after the brokers were away, a backlog behind a rebalance.)"""
        taken = self._taken.get(i)
        return taken is not None and now - taken <= limit


def _consensus(lasts: np.ndarray, step: float) -> float:
    """The newest of ``lasts`` at most ``step`` past their lower median (NaN: none), so
    that a minority of clocks ahead cannot set it (see ``NodeSilence``)."""
    lasts = lasts[~np.isnan(lasts)]
    if not len(lasts):
        return math.nan
    median = float(np.sort(lasts)[(len(lasts) - 1) // 2])
    return float(lasts[lasts <= median + step].max())


def _offset(seconds: float) -> str:
    """A clock's offset in words: "2 h ahead", "90 s behind"."""
    size = abs(seconds)
    amount = f"{size / 3600:.1f} h" if size >= 3600 else f"{size:.0f} s"
    return f"{amount} {'ahead' if seconds > 0 else 'behind'}"


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
