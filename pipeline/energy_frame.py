"""One frame's intervals booked into a node's state: the energy integration's rules.

``energy.EnergyIntegrator`` feeds it frames in time order and keeps the store (the
node states it loads, the rows it writes); this part is pure and touches nothing.

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
much time passed, the rest is neither energy nor missing), or the counter is sound across
a silence of the whole node (``energy_counter.gap_energy``: it went on from the same
reading, at a mean power within ``gap_limit_ratio`` of the GPU's enforced power limit,
else its default limit or its part's TDP): then its step is the gap's energy, measured,
spread evenly over the gap's hours (where in the gap it was drawn is not known) and kept
apart in the row (``gap_j``, ``gap_s``; the gap counted where it ends: ``gaps``,
``longest_gap_s``). A jump of the node's clock further than ``max_jump_s`` is a clock
error: the node starts anew, nothing is booked for it. A step back (``energy_clock``)
re-anchors the watermarks. The CPU packages
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
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from fleetwatch.frame import Frame
from fleetwatch.parts import tdp_w
from fleetwatch.pipeline.energy_clock import ClockSteps
from fleetwatch.pipeline.energy_counter import clock_ran, gap_energy, interval_energy
from fleetwatch.pipeline.energy_owners import Owner, Owners, across_gap, split_node, split_owner
from fleetwatch.pipeline.energy_settings import EnergySettings, over_tdp_w
from fleetwatch.pipeline.energy_state import (
    Key,
    NodeState,
    Watermark,
    add_interval,
    add_shares,
    mark_gap,
)
from fleetwatch.pipeline.store.base import gpu_device
from fleetwatch.pipeline.store.ledger import CPU_DEVICE, HOST_DEVICE, LISTED_DEVICE, REST_DEVICE

# Said under the integrator's name, as operators' logging settings know it.
log = logging.getLogger("fleetwatch.pipeline.energy")
LONG_GAPS_TO_WARN = 3  # intervals over max_gap_s in a row: the node's cadence, not an outage


class FrameIntegration:
    """Frames into node states (``_frame``), with what it met on the way: the nodes that
    report too slowly, the stale counters, the nodes' clock faults (``clock``)."""

    def __init__(self, settings: EnergySettings, clock: Callable[[], float] | None) -> None:
        self.s = settings
        self._clock = clock
        self._now = math.inf
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
            limit = m.get("gpu_power_limit_w")
            energy, owners = self._interval(
                node, f, dev, power, counter, owners, idle,
                power is not None and over is not None and power > over,
                touched, limit,
                limit or m.get("gpu_power_default_limit_w") or tdp_w(g.model))
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
                  over: bool, touched: set[Key], limit_w: float | None = None,
                  gap_limit_w: float | None = None) -> tuple[float, Owners]:
        """Integrate ``dev``'s interval ending at ``f``; returns the energy booked (J) and
        the owners it was booked to (over a gap, only those that held ``dev`` throughout).
        ``gap_limit_w``: the power the board can hold, that a counter's step across a gap
        must not exceed (``gap_energy``); None: such a step is not booked."""
        prev = node.devs.get(dev)
        energy: float | None = 0.0
        gap: float | None = None
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
                elif (was := node.devs.get(HOST_DEVICE)) is None or was.ts <= prev.ts:
                    # The whole node was silent (frames sent while its driver was away say
                    # it may have reloaded, which restarts the counter: missing time).
                    gap = gap_energy(self.s, prev, dt, power, counter, gap_limit_w)
            if dt <= self.s.max_gap_s:
                energy, owed, stale = interval_energy(self.s, prev, dt, power, counter, limit_w)
                if stale:
                    self._stale(f, dev, dt, power)
            if dt > self.s.max_gap_s:
                # Missing time across a silence: not the end sample's owner's unless it
                # held the GPU at the start too (a job that began after the silence).
                owners = across_gap(prev.owners, owners)
            if gap is not None:  # measured by the counter across the gap, spread evenly
                energy = gap
                vals = (gap, 0.0, 0.0, 0.0, 0.0, 0.0, gap, dt)
            elif energy is None:
                vals = (0.0, 0.0, 0.0, 0.0, dt, 0.0)
            else:
                vals = (energy, energy if idle else 0.0, dt, dt if idle else 0.0, 0.0,
                        dt if over else 0.0)
            if len(owners) == 1:
                add_interval(node, f, dev, prev.ts, dt, owners[0][0], vals, touched)
            else:
                add_shares(node, f, dev, prev.ts, dt, owners, vals, touched)
            if gap is not None:
                mark_gap(node, f, dev, dt, owners, touched)
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
