"""Energy integrated once, in the processor: frames in time order in, ledger rows out.

Per GPU, energy over an interval between two samples is the difference of
NVML's total energy counter (``gpu_energy_j``, joules since the driver
loaded) where the GPU has one; a counter that went down (driver reload) or
jumped by more than the board could draw (``limit_ratio`` times its enforced
power limit, ``gpu_power_limit_w``, where the frame carries it, else
``max_plausible_w``) is not trusted and the interval falls back to the
trapezoid of ``gpu_power_w``, as does a GPU without the counter. A counter
that stands still while the board draws power (a step under ``stale_ratio``
of the smaller power sample times the interval: a stale DCGM field, a hung
counter) is not trusted either: that interval takes the power samples, and
what they booked is owed back when the counter moves again, so its catch-up
step counts only the energy the power samples did not already book (the
counter's total stands; a counter updated less often than it is read comes
out exact). Such intervals are counted (``stale_counter_intervals``) and said
once per node. An interval longer than ``max_gap_s`` is not filled with
invented power: it is counted as missing time, unless the counter's step is one the
board's power draws in ``max_gap_s`` or less (the node's clock stepped forward: that
much time passed, the rest is neither energy nor missing). A jump of the node's clock
further than ``max_jump_s`` is a clock error: the node starts anew, nothing is booked
for it. A step back (``energy_clock``) re-anchors the watermarks. The CPU packages
(``host_cpu_power_w``, RAPL) are integrated the same way; the rest of the
node is a static model (``node_static_w`` for every second the node reports).

A GPU the node's frames stop listing for longer than ``max_gap_s`` while the
node keeps reporting (frames that say its NVML does not answer, ``host_nvml_up``
0, list no GPU for that reason: that time is missing, as for a silent node) is
absent (a board removed or replaced, one the driver no longer enumerates): that
time is neither energy nor missing time, and when a GPU is listed again at that
index it starts anew at that sample, as a new GPU does. A GPU the node lists but
cannot read (lost) is missing time, and so is every GPU's time while the whole
node is silent.

An interval is attributed to the job, user and team of the sample that ends
it (NVML's utilization is "over the last sample period", so that sample
describes the interval) and split across hour buckets in proportion to time.
The missing time of an interval longer than ``max_gap_s`` goes to that owner only
where its job also held the device at the interval's start, else to no owner
(``energy_owners.across_gap``): a job that started after a silence, or ended in it,
did not hold the GPU for it. Who held it is kept in memory with the watermark: a
processor that takes a node over in its silence books that time to no owner.
A GPU several jobs share (MPS, time slicing: the agent lists them sorted,
comma-separated) is split equally among its jobs, energy and seconds alike;
each job's part goes to its user and team where the frame pairs them (as many
users as jobs, in the jobs' order), to the one user named, or else equally to
each user named. The CPU packages and the rest of the node are split among the
owners of the node's GPUs in proportion to those GPUs' energy over the same
interval (equally among them when no GPU has a measured interval); the part of the
GPUs no job holds stays with no job.
A GPU is idle over an interval when its SM activity is under
``idle_sm_ratio``; without SM activity (every GPU older than Hopper without
DCGM), when ``gpu_util_pct`` reads 0 at both ends of the interval, whether a
job holds it or not. NVML's utilization is the share of its own short sample
period (1/6 s to 1 s) in which a kernel ran, not of the agent's interval: one
0 between busy readings is a stall of about a second, not an idle interval, so
it alone counts nothing; where the previous reading is not known (the first
after a restart) the interval's end reading decides. A job's GPU that does
nothing counts as idle: that energy is what an operator wants to see (the
Acme study's ~60 W per idle GPU).

Idempotence: rows are absolute bucket totals, written with the per-device
watermark in one request. A node's state is loaded from the store only when
the integrator holds none: the first time its frames come (a processor
started, a partition just assigned; a partition moved away is dropped, see
``drop``). One it holds is used however long the node was silent, since a
store may not yet give back what was just written (VictoriaMetrics takes
seconds), and a silence read as a node starting anew would not count as
missing time; samples at or before the watermark are skipped, so a batch
replayed after a crash adds nothing. The batch is integrated on copies of the
state, which replace it only once the store has taken the rows. A counter's
watermark is stored as its reading plus what power booked while it stood
still, and the reading itself beside it while it owes, so a processor that
takes over mid-way (a restart, a partition moved) still owes that energy back
once: its next, still frozen, reading is a counter standing still, not one
that went down (which would forget the debt and count the catch-up again).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence

from fleetwatch.frame import Frame
from fleetwatch.pipeline.energy_clock import ClockSteps, in_steps
from fleetwatch.pipeline.energy_counter import clock_ran, interval_energy
from fleetwatch.pipeline.energy_owners import Owner, Owners, across_gap, split_node, split_owner
from fleetwatch.pipeline.energy_settings import EnergySettings, over_tdp_w
from fleetwatch.pipeline.energy_state import (
    Acc,
    Key,
    NodeState,
    Watermark,
    add_interval,
    add_shares,
    loaded,
    newest_states,
    prune,
    stored,
)
from fleetwatch.pipeline.store.base import StoreError, StoreRejected, gpu_device
from fleetwatch.pipeline.store.ledger import (
    BUCKET_S,
    CPU_DEVICE,
    HOST_DEVICE,
    LISTED_DEVICE,
    REST_DEVICE,
    DeviceState,
    EnergyRow,
    EnergyStore,
    bucket_floor,
)

log = logging.getLogger(__name__)
# A frame this far ahead of the processor's clock after a silence: the silence is a clock
# error (missing time up to a time that has not come), not booked.
AHEAD_S = 300.0
DEFAULT_SETTINGS = EnergySettings()
LONG_GAPS_TO_WARN = 3  # intervals over max_gap_s in a row: the node's cadence, not an outage


class EnergyIntegrator:
    """Frames in, ledger rows written to ``store``. One per processor; pure but for the
    store calls in ``observe`` (``integrate`` alone touches nothing)."""

    def __init__(self, store: EnergyStore | None, settings: EnergySettings = DEFAULT_SETTINGS,
                 clock: Callable[[], float] | None = None) -> None:
        """``clock``: the processor's wall clock; given, a silence that ends ahead of it
        (by more than ``AHEAD_S``) is a clock error, not missing time."""
        self.store = store
        self.s = settings
        self._clock = clock
        self._now = math.inf
        self._nodes: dict[tuple[str, str], NodeState] = {}
        self._rolled_to = -math.inf  # hours before this are rolled up
        # Nodes whose frames keep coming further apart than max_gap_s (a slow agent
        # interval, not an outage): counted per node, and said once each.
        self._long_gaps: dict[tuple[str, str], int] = {}
        self.slow_nodes: set[tuple[str, str]] = set()
        # Intervals whose counter stood still while the board drew power; nodes said.
        self.stale_counter_intervals = 0
        self._stale_said: set[tuple[str, str]] = set()
        self._split: dict[Owner, Owners] = {}
        # The nodes' clock faults met, by kind (``energy_clock.ClockSteps``).
        self.clock = ClockSteps()
        # ``history``: the end of the span being written (None: live frames), and the
        # stored watermarks newer than it, per node, which its own must not replace.
        self._history_end: float | None = None
        self._held: dict[tuple[str, str], list[DeviceState]] = {}

    def history(self, end_ts: float) -> None:
        """The frames to come are a history span ending at ``end_ts`` that the store holds
        no sample of (``simulate``): never integrated before, so not a replay. A node whose
        stored watermark is newer than its first frame is a span written before the stored
        history: it starts anew (no clock error), books its hours beside the stored rows,
        and leaves the stored watermark for the next run to resume from."""
        self._history_end = end_ts

    # -- the processor's entry point ------------------------------------
    def observe(self, frames: Sequence[Frame],
                refused: Callable[[int, str], None] | None = None) -> int:
        """Integrate a stored batch and write its rows; returns the rows written.

        ``refused``: told (rows, the store's reason) when the store refuses them for
        good (``StoreRejected``); the ledger goes on past them rather than integrate the
        same span again on every batch. Without it, the refusal is raised."""
        nodes, rows, states = self.integrate(frames)
        if rows or states:
            assert self.store is not None
            try:
                self.store.write_energy(rows, states)
            except StoreRejected as exc:
                if refused is None:
                    raise
                refused(len(rows) + len(states), exc.reason)
                rows = []
        self._nodes.update(nodes)  # only now that the store has them
        newest = -math.inf
        for node in nodes.values():
            prune(node)
            newest = max(newest, node.last_ts)
        self._roll_up(newest)
        return len(rows)

    def _roll_up(self, newest_ts: float) -> None:
        """Once an hour has closed (no sample within max_gap_s can reach it), let the store
        aggregate it for the dashboard; a store without roll-ups sums at read time."""
        roll_up = getattr(self.store, "roll_up_energy", None)
        closed = bucket_floor(newest_ts - self.s.max_gap_s)
        if roll_up is None or not math.isfinite(newest_ts) or closed <= self._rolled_to:
            return
        try:
            roll_up(closed)
        except StoreError as exc:  # the rows are stored; the roll-up is tried again later
            log.warning("energy roll-up failed, will retry: %s", exc)
            return
        self._rolled_to = closed

    def drop(self, nodes: Iterable[tuple[str, str] | str]) -> None:
        """Forget nodes whose partition this processor no longer owns: (cluster, node)
        pairs, or node names (every cluster's node of that name)."""
        gone = set(nodes)
        for key in [k for k in self._nodes if k in gone or k[1] in gone]:
            self._nodes.pop(key, None)

    def integrate(self, frames: Sequence[Frame]
                  ) -> tuple[dict[tuple[str, str], NodeState], list[EnergyRow], list[DeviceState]]:
        """The batch on copies of the touched nodes' state: (new states, rows, watermarks)."""
        self._now = self._clock() + AHEAD_S if self._clock is not None else math.inf
        by_node: dict[tuple[str, str], list[Frame]] = {}
        for f in frames:
            by_node.setdefault((f.cluster, f.node), []).append(f)
        out: dict[tuple[str, str], NodeState] = {}
        rows: list[EnergyRow] = []
        states: list[DeviceState] = []
        for key, group in by_node.items():
            node = self._node(key, min(f.ts for f in group))
            touched: set[Key] = set()
            # In arrival order, cut where the node's clock stepped back (its seq went on
            # while its time went back): each part in time order, the step re-anchors.
            for part, stepped in in_steps(group, node.clock, node.last_ts, self.clock,
                                          self.s.max_jump_s):
                part.sort(key=lambda f: f.ts)
                if stepped:
                    self._step_back(key, node, part[0])
                for f in part:
                    self._frame(node, f, touched)
            out[key] = node
            rows.extend(EnergyRow(*k, *node.acc[k]) for k in sorted(touched))
            new = [stored(key, d, s) for d, s in node.devs.items()]
            held = self._held.get(key)
            states.extend(newest_states(held, new) if held else new)
        return out, rows, states

    # -- state ---------------------------------------------------------------
    def _node(self, key: tuple[str, str], first_ts: float) -> NodeState:
        """The node's state: the one held in memory, however long the node was silent
        (a store may not give back for seconds what was just written to it: a processor
        catching up would find no watermark there, and the silence would vanish instead
        of counting as missing); read from the store only when none is held."""
        node = self._nodes.get(key)
        if node is not None:
            return node.copy()
        if self.store is None:
            return NodeState({}, {}, -math.inf)
        saved, saved_rows = self.store.energy_state(*key, first_ts)
        if self._history_end is not None and saved and max(s.ts for s in saved) > first_ts:
            # Backfill: the span's hours may share the stored history's first hour (and an
            # older span's last): their rows are added to, not replaced.
            self._held[key] = saved
            rows = self.store.energy(bucket_floor(first_ts),
                                     bucket_floor(self._history_end) + BUCKET_S, *key)
            acc_b: Acc = {tuple(r[:8]): list(r[8:]) for r in rows}  # type: ignore[misc]
            return NodeState({}, acc_b, -math.inf)
        devs = {s.device: loaded(s) for s in saved}
        acc: Acc = {tuple(r[:8]): list(r[8:]) for r in saved_rows}  # type: ignore[misc]
        last = max((s.ts for s in saved), default=-math.inf)
        return NodeState(devs, acc, last)

    # -- integration -----------------------------------------------------------
    def _frame(self, node: NodeState, f: Frame, touched: set[Key]) -> None:
        s = self.s
        was = node.devs.get(HOST_DEVICE)  # the node's clock at its previous frame
        if was is not None and (abs(f.ts - was.ts) > s.max_jump_s or (
                f.ts - was.ts > s.max_gap_s and f.ts > self._now)):
            self._anew(node, f, was.ts)
        weights: dict[Owner, float] = {}   # each owner's GPU energy in this frame
        for g in f.gpus:
            m = g.metrics
            user = g.info.get("user", "") if g.info else ""
            team = g.info.get("team", "") if g.info else ""
            job = g.job or ""
            if "," in job or "," in user or "," in team:
                owners = self._shared((job, user, team))
            else:
                owners = (((job, user, team), 1.0),)
            dev = gpu_device(g.index)
            power = m.get("gpu_power_w")
            counter = m.get("gpu_energy_j")
            sm = m.get("gpu_sm_active_ratio")
            util = m.get("gpu_util_pct")
            prev = node.devs.get(dev)
            if sm is not None:
                idle = sm < s.idle_sm_ratio
            else:
                idle = _idle_by_util(util, prev.util if prev is not None else None)
            over = over_tdp_w(g, s.tdp_w)
            energy, owners = self._interval(
                node, f, dev, power, counter, owners, idle,
                power is not None and over is not None and power > over,
                touched, m.get("gpu_power_limit_w"))
            now = node.devs.get(dev)
            if now is not None and now.ts == f.ts:
                now.util = util
            if len(owners) == 1:
                o = owners[0][0]
                weights[o] = weights.get(o, 0.0) + energy
            else:
                for o, share in owners:
                    weights[o] = weights.get(o, 0.0) + energy * share
        node_owners = split_node(weights)
        cpu = f.host.metrics.get("host_cpu_power_w")
        if cpu is not None or CPU_DEVICE in node.devs:
            self._interval(node, f, CPU_DEVICE, cpu, None, node_owners, False, False, touched)
        # The node's clock: the rest of the node draws node_static_w while it reports.
        host = node.devs.get(HOST_DEVICE)
        if host is not None and f.ts > host.ts:
            self._cadence(f, f.ts - host.ts)
            if f.ts - host.ts <= s.max_gap_s:
                node.clock.cadence = f.ts - host.ts
        if host is not None and s.node_static_w > 0:
            dt = f.ts - host.ts
            if 0 < dt <= s.max_gap_s:
                add_shares(node, f, REST_DEVICE, host.ts, dt, node_owners,
                           (s.node_static_w * dt, 0.0, dt, 0.0, 0.0, 0.0), touched)
            elif dt > s.max_gap_s:
                add_shares(node, f, REST_DEVICE, host.ts, dt,
                           across_gap(host.owners, node_owners),
                           (0.0, 0.0, 0.0, 0.0, dt, 0.0), touched)
        if host is None or f.ts > host.ts:
            node.devs[HOST_DEVICE] = Watermark(f.ts, None, None, owners=node_owners)
        listed = node.devs.get(LISTED_DEVICE)
        if f.host.metrics.get("host_nvml_up") != 0.0 and (listed is None or f.ts > listed.ts):
            node.devs[LISTED_DEVICE] = Watermark(f.ts, None, None)
        node.last_ts = max(node.last_ts, f.ts)
        if node.clock.anchor == f.ts:
            node.clock.anchor = None

    def _shared(self, owner: Owner) -> Owners:
        """The owners of a GPU several jobs share (comma-separated): each job's equal part
        with its user and team (``split_owner``), remembered."""
        split = self._split.get(owner)
        if split is None:
            if len(self._split) > 10_000:  # owners come and go: keep the memo bounded
                self._split.clear()
            split = self._split[owner] = split_owner(owner)
        return split

    def _cadence(self, f: Frame, dt: float) -> None:
        """Say, once per node, when its frames come further apart than ``max_gap_s`` time
        after time: every such interval is missing time, so the node's energy would be
        all "missing" for as long as its agent samples that slowly."""
        key = (f.cluster, f.node)
        if dt <= self.s.max_gap_s:
            self._long_gaps.pop(key, None)
            return
        n = self._long_gaps[key] = self._long_gaps.get(key, 0) + 1
        if n == LONG_GAPS_TO_WARN and key not in self.slow_nodes:
            self.slow_nodes.add(key)
            log.warning("%s sends a frame every %.0f s or more, longer than energy.max_gap_s "
                        "= %.0f s: its energy is counted as missing time, not integrated; set "
                        "energy.max_gap_s above the agents' agent.interval_s (a few times it)",
                        f.node, dt, self.s.max_gap_s)

    def _interval(self, node: NodeState, f: Frame, dev: str, power: float | None,
                  counter: float | None, owners: Owners, idle: bool,
                  over: bool, touched: set[Key], limit_w: float | None = None
                  ) -> tuple[float, Owners]:
        """Integrate ``dev``'s interval ending at ``f``; returns the energy booked (J) and
        the owners it was booked to (over a gap, only those that held ``dev`` throughout)."""
        prev = node.devs.get(dev)
        energy: float | None = 0.0
        owed = 0.0
        held = owners  # who holds dev at f: its watermark's owners for the next interval
        if prev is not None:
            dt = f.ts - prev.ts
            if dt <= 0 and node.clock.anchor == f.ts and node.clock.cadence > 0:
                # The frame after a step back of the node's clock: its counter ran on, so
                # the node's usual interval before it is booked from the counter's step.
                dt = node.clock.cadence
                prev = Watermark(f.ts - dt, prev.power, prev.counter, prev.owed, prev.util)
            elif dt <= 0:
                if node.clock.anchor == f.ts:  # re-anchored, unbooked
                    node.devs[dev] = Watermark(f.ts, power, counter, owners=held)
                return 0.0, owners  # at or before the watermark: integrated already (a replay)
            if dt > self.s.max_gap_s:
                # Absent: the node's GPU list left it out for longer than max_gap_s. Frames
                # sent while NVML was away list no GPU without saying anything of them.
                host = node.devs.get(LISTED_DEVICE) or node.devs.get(HOST_DEVICE)
                if host is not None and host.ts - prev.ts > self.s.max_gap_s:
                    # The node reported without this GPU: it was absent (removed, replaced),
                    # not unmeasured. It starts anew here, as a new GPU does.
                    node.devs[dev] = Watermark(f.ts, power, counter, owners=held)
                    return 0.0, owners
                energy = None
                ran = clock_ran(self.s, prev, dt, power, counter)
                if ran is not None:  # the node's clock stepped forward: ``ran`` s passed
                    self.clock.forward(f, dt - ran)
                    dt = ran
                    prev = Watermark(f.ts - dt, prev.power, prev.counter, prev.owed, prev.util)
            if dt <= self.s.max_gap_s:
                energy, owed, stale = interval_energy(self.s, prev, dt, power, counter, limit_w)
                if stale:
                    self._stale(f, dev, dt, power)
            if dt > self.s.max_gap_s:
                # Missing time across a silence: not the end sample's owner's unless it
                # held the GPU at the start too (a job that began after the silence).
                owners = across_gap(prev.owners, owners)
            if energy is None:
                vals = (0.0, 0.0, 0.0, 0.0, dt, 0.0)
            else:
                vals = (energy, energy if idle else 0.0, dt, dt if idle else 0.0, 0.0,
                        dt if over else 0.0)
            if len(owners) == 1:
                add_interval(node, f, dev, prev.ts, dt, owners[0][0], vals, touched)
            else:
                add_shares(node, f, dev, prev.ts, dt, owners, vals, touched)
        node.devs[dev] = Watermark(f.ts, power, counter, owed, owners=held)
        return energy or 0.0, owners

    def _anew(self, node: NodeState, f: Frame, was: float) -> None:
        """The node's clock jumped further than ``max_jump_s``, or ahead of this processor's
        clock: every device starts anew at ``f`` (the jump is neither energy nor missing
        time: booked, a clock error would be years of hourly rows). A jump forward to a
        time the processor's clock has reached is a silence that long, said as one; any
        other is a clock error, warned of."""
        erred = node.clock.erred
        if f.ts > was and self._clock is not None and f.ts <= self._now and erred is None:
            # Forward to a time this processor's clock has reached: the node was silent
            # that long (a repair; simulate appending a later span), its clock is right.
            self.clock.silence(f, was, self.s.max_jump_s)
        elif erred is not None and abs(f.ts - erred) <= self.s.max_jump_s:
            node.clock.erred = None  # back from the error: the same error, said and counted
        else:
            self.clock.error(f, was, self.s.max_jump_s)
            node.clock.erred = was
        node.devs.clear()
        node.last_ts = f.ts

    def _step_back(self, key: tuple[str, str], node: NodeState, f: Frame) -> None:
        """``f`` is the first frame after the node's clock stepped back: the devices are
        re-anchored there (``_interval``), and the hours it goes back into, which
        ``energy_state.prune`` may have let go, are read again so that their totals add up."""
        node.clock.anchor = f.ts
        if node.last_ts - f.ts > self.s.max_jump_s:
            return  # a clock error: _frame starts the node anew
        host = node.devs.get(HOST_DEVICE)
        if host is not None:
            node.devs[HOST_DEVICE] = Watermark(f.ts, None, None, owners=host.owners)
        if LISTED_DEVICE in node.devs:
            node.devs[LISTED_DEVICE] = Watermark(f.ts, None, None)
        if self.store is not None:
            start = bucket_floor(f.ts - self.s.max_gap_s)
            for r in self.store.energy(start, node.last_ts + BUCKET_S, *key):
                node.acc.setdefault(tuple(r[:8]), list(r[8:]))  # type: ignore[arg-type]
        node.last_ts = f.ts

    def _stale(self, f: Frame, dev: str, dt: float, power: float | None) -> None:
        self.stale_counter_intervals += 1
        key = (f.cluster, f.node)
        if key not in self._stale_said:
            self._stale_said.add(key)
            log.warning("%s %s: its energy counter (gpu_energy_j) stood still over %.0f s "
                        "while its board power read %.0f W (a stale DCGM field or a hung "
                        "counter): such intervals use the power samples, and the counter's "
                        "catch-up is not counted twice (said once per node)",
                        f.node, dev, dt, power or 0.0)


def _idle_by_util(util: float | None, prev: float | None) -> bool:
    """Idle without SM activity: no kernel at either end of the interval. NVML's
    ``utilization.gpu`` covers its last sample period (1/6 s to 1 s), so one 0 between
    busy readings says a second's stall, not an idle interval. Without the previous
    reading (the first interval after a restart), the end reading decides."""
    if util is None or util > 0.0:
        return False
    return prev is None or prev <= 0.0
