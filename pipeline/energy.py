"""Energy integrated once, in the processor: frames in time order in, ledger rows out.

How each frame's intervals are booked (the counter, the power samples, gaps, owners,
idle time) is ``energy_frame``'s; this module keeps the node states across batches
and the store.

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
from fleetwatch.pipeline.energy_clock import in_steps
from fleetwatch.pipeline.energy_frame import FrameIntegration
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.energy_state import (
    Acc,
    Key,
    NodeState,
    Watermark,
    loaded,
    newest_states,
    prune,
    stored,
)
from fleetwatch.pipeline.store.base import StoreError, StoreRejected
from fleetwatch.pipeline.store.ledger import (
    BUCKET_S,
    HOST_DEVICE,
    LISTED_DEVICE,
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


class EnergyIntegrator(FrameIntegration):
    """Frames in, ledger rows written to ``store``. One per processor; pure but for the
    store calls in ``observe`` (``integrate`` alone touches nothing). How each frame is
    booked: ``energy_frame``."""

    def __init__(self, store: EnergyStore | None, settings: EnergySettings = DEFAULT_SETTINGS,
                 clock: Callable[[], float] | None = None) -> None:
        """``clock``: the processor's wall clock; given, a silence that ends ahead of it
        (by more than ``AHEAD_S``) is a clock error, not missing time."""
        super().__init__(settings, clock)
        self.store = store
        self._nodes: dict[tuple[str, str], NodeState] = {}
        self._rolled_to = -math.inf  # hours before this are rolled up
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

