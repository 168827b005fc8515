"""The energy integrator's state (``pipeline.energy``): per node, each device's watermark
and the totals of its open hour buckets, intervals added to those buckets, and the
watermark's stored form (``ledger.DeviceState``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from fleetwatch.frame import Frame
from fleetwatch.pipeline.energy_clock import NodeClock
from fleetwatch.pipeline.energy_owners import Owners
from fleetwatch.pipeline.store.ledger import BUCKET_S, DeviceState, bucket_floor

# Accumulator slots, in EnergyRow's order: ENERGY_FIELDS, then GAP_FIELDS.
_E, _IDLE_J, _SEC, _IDLE_S, _MISS, _OVER, _GAP_J, _GAP_S, _GAPS, _LONGEST = range(10)
SLOTS = 10


Key = tuple[int, str, str, str, str, str, str, str]   # EnergyRow's first eight fields
Acc = dict[Key, list[float]]


class Watermark:
    """A device's watermark. ``owed``: joules the power samples booked while the counter
    stood still, that its next real step pays back (0 almost always). ``util``: its last
    ``gpu_util_pct`` reading, kept in memory only (the idle rule without SM activity).
    ``owners``: who held the device at that sample, in memory only (a gap's time is charged
    to a job only where it held the device at both ends; not known: to no owner)."""

    __slots__ = ("ts", "power", "counter", "owed", "util", "owners")

    def __init__(self, ts: float, power: float | None, counter: float | None,
                 owed: float = 0.0, util: float | None = None,
                 owners: Owners | None = None) -> None:
        self.ts, self.power, self.counter, self.owed = ts, power, counter, owed
        self.util, self.owners = util, owners


class NodeState:
    """One node's integrator state: per-device watermarks and its open buckets' totals.
    In memory only (``energy_clock.NodeClock``): the newest ``seq`` seen, the node's cadence, and
    after a step back of its clock, the frames of before the step to pass over."""

    __slots__ = ("devs", "acc", "last_ts", "clock")

    def __init__(self, devs: dict[str, Watermark], acc: Acc, last_ts: float,
                 clock: NodeClock | None = None) -> None:
        self.devs, self.acc, self.last_ts = devs, acc, last_ts
        self.clock = clock or NodeClock()

    def copy(self) -> NodeState:
        return NodeState({d: Watermark(s.ts, s.power, s.counter, s.owed, s.util, s.owners)
                          for d, s in self.devs.items()},
                         {k: v.copy() for k, v in self.acc.items()}, self.last_ts,
                         self.clock.copy())


def add_shares(node: NodeState, f: Frame, dev: str, t0: float, dt: float,
               owners: Owners, vals: tuple[float, ...], touched: set[Key]) -> None:
    for owner, share in owners:
        add_interval(node, f, dev, t0, dt, owner,
                     vals if share == 1.0 else tuple(v * share for v in vals), touched)


def add_interval(node: NodeState, f: Frame, dev: str, t0: float, dt: float,
                 owner: tuple[str, str, str], vals: tuple[float, ...], touched: set[Key]) -> None:
    """Add an interval (t0, t0 + dt] to its hour buckets, split in proportion to time."""
    t1 = t0 + dt
    start = int(t0 // BUCKET_S) * BUCKET_S
    if t1 <= start + BUCKET_S:  # the common case, inside one hour: no shares
        key: Key = (start, f.cluster, f.rack, f.node, dev, *owner)
        acc = node.acc.get(key)
        if acc is None:
            acc = node.acc[key] = [0.0] * SLOTS
        acc[0] += vals[0]
        acc[1] += vals[1]
        acc[2] += vals[2]
        acc[3] += vals[3]
        acc[4] += vals[4]
        acc[5] += vals[5]
        if len(vals) > 6:  # across a gap: its energy and time
            acc[_GAP_J] += vals[_GAP_J]
            acc[_GAP_S] += vals[_GAP_S]
        touched.add(key)
        return
    while True:
        end = start + BUCKET_S
        share = (min(t1, end) - max(t0, start)) / dt
        if share > 0:
            key = (start, f.cluster, f.rack, f.node, dev, *owner)
            acc = node.acc.get(key)
            if acc is None:
                acc = node.acc[key] = [0.0] * SLOTS
            for i, v in enumerate(vals):
                if v:
                    acc[i] += v * share
            touched.add(key)
        if t1 <= end:
            return
        start = end


def mark_gap(node: NodeState, f: Frame, dev: str, dt: float, owners: Owners,
             touched: set[Key]) -> None:
    """Count a gap of ``dt`` s whose energy the counter measured (``add_interval`` spread
    it) in the bucket where it ends, at ``f``: each owner's share of one gap, and the
    longest such gap of the bucket."""
    end = -(-f.ts // BUCKET_S) * BUCKET_S - BUCKET_S  # (t0, t1]: t1 on the hour is before it
    for owner, share in owners:
        key: Key = (int(end), f.cluster, f.rack, f.node, dev, *owner)
        acc = node.acc.get(key)
        if acc is None:
            acc = node.acc[key] = [0.0] * SLOTS
        acc[_GAPS] += share
        acc[_LONGEST] = max(acc[_LONGEST], dt)
        touched.add(key)


def stored(key: tuple[str, str], device: str, d: Watermark) -> DeviceState:
    """A device's watermark to store. A counter's carries what it owes (reading plus owed:
    the reading it would show had it moved with the power booked), and the reading apart
    while it owes, so that a processor that takes over mid-way pays it back once."""
    if d.counter is None:
        return DeviceState(key[0], key[1], device, d.ts, d.power, None)
    if d.owed > 0.0:
        return DeviceState(key[0], key[1], device, d.ts, d.power, d.counter + d.owed, d.counter)
    return DeviceState(key[0], key[1], device, d.ts, d.power, d.counter)


def loaded(s: DeviceState) -> Watermark:
    """A stored watermark back as the integrator's: the reading and what it owes apart.
    A store written before the reading was kept (or by such a processor) has the sum
    only: it resumes from that, as that release did."""
    if s.counter_j is not None and s.reading_j is not None and s.reading_j <= s.counter_j:
        return Watermark(s.ts, s.power_w, s.reading_j, s.counter_j - s.reading_j)
    return Watermark(s.ts, s.power_w, s.counter_j)


def prune(node: NodeState) -> None:
    """Keep the buckets a late sample can still reach: from the hour before the node's
    newest sample on (after a step back of its clock, the hours ahead of it too)."""
    if len(node.acc) < 64:
        return
    newest = bucket_floor(node.last_ts) if math.isfinite(node.last_ts) else max(
        k[0] for k in node.acc)
    for k in [k for k in node.acc if k[0] < newest - BUCKET_S]:
        del node.acc[k]


def newest_states(held: Sequence[DeviceState], new: Sequence[DeviceState]
                  ) -> list[DeviceState]:
    """Per device, the newer of the stored watermark (``held``) and the one just
    integrated: a span written before the stored history (``simulate`` backfilling) books
    its own hours but must not move a node's watermark back to its end, where the next
    run would resume from."""
    out = {s.device: s for s in held}
    for s in new:
        was = out.get(s.device)
        if was is None or s.ts > was.ts:
            out[s.device] = s
    return list(out.values())
