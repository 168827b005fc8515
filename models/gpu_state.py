"""Per-GPU state arrays that outlive a GPU's absence, and a batch's frames in arrival order.

The learned detectors keep a GPU's state (its smoothed residual, its open
minute) while the GPU is missing from a node's frames, until its node is
dropped: ``GpuState`` gives every (cluster, node, GPU) a slot in arrays of
its own fields, and never reuses it before ``drop``. ``arrival`` orders a
``Batch`` (which sorts frames by time) as the frames came: a detector whose
state advances one sample at a time per GPU must see each GPU's samples in
the order it was handed them, and say what it found in that order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import is_
from typing import Any

import numpy as np

from fleetwatch.frame import Frame
from fleetwatch.models.batch import Batch
from fleetwatch.models.gpu_slots import Boards, Move

Key = tuple[str, str, int]  # (cluster, node, GPU index)


class GpuState:
    """Arrays of per-GPU fields indexed by slot; (cluster, node, GPU) -> slot.

    ``fields`` gives each array's initial value (a bool, or a float), ``shapes`` the
    shape of a field that holds more than one value per GPU; a dropped node's slots get
    their initial values back and are reused. A GPU whose board was replaced (``Boards``)
    gets a new slot from the frame that names the new board on; the old board's is kept
    for it while it is the slot's board before the new one, so a board that comes back
    (two machines under one node name, alternating; a board swapped back) takes its own
    state back; a board left behind twice has its slot freed at the next batch.
    ``replaced`` lists the GPUs that got a board new to them in the last ``slots``, for
    state a detector keeps outside these arrays.
    """

    def __init__(self, fields: Mapping[str, float | bool],
                 shapes: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self._init = dict(fields)
        self._shapes = dict(shapes or {})
        self.slot_of: dict[Key, int] = {}
        self._free: list[int] = []
        self._next = 0  # slots ever handed out
        # Per (cluster, node): its GPU indices and their slots, padded to a width.
        self._nodes: dict[tuple[str, str], tuple[tuple[int, ...], list[int]]] = {}
        self.arrays: dict[str, np.ndarray] = {k: self._new(k, 64) for k in fields}
        self._boards = Boards()
        self._retired: list[int] = []
        self._parked: dict[Key, tuple[str, int]] = {}  # the board before and its slot
        self.replaced: list[Key] = []

    def _new(self, name: str, size: int) -> np.ndarray:
        return np.full((size, *self._shapes.get(name, ())), self._init[name])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def slots(self, batch: Batch) -> np.ndarray:
        """(F, G) slots of the batch's GPUs, in its row order; -1 where there is no GPU."""
        if self._retired:
            self._reset(self._retired)
            self._retired = []
        out = node_rows(batch, self._nodes, lambda f, ids: [
            self._slot((f.cluster, f.node, g)) for g in ids], -1, np.int64)
        replaced = self._boards.replaced(batch)
        self.replaced = []
        rows: dict[int, list[Move]] = {}
        for r, m in replaced:
            rows.setdefault(r, []).append(m)
        for r, moves in rows.items():
            self._renew(batch, r, moves, out)
        return out

    def _renew(self, batch: Batch, r: int, moves: list[Move], out: np.ndarray) -> None:
        """Row ``r``'s GPUs whose board changed, all at once (two boards NVML numbered the
        other way round swap slots): a board from another index of the node takes its own
        slot (``Move.src``), one met again its own, another a fresh one; the old board's is
        kept for it unless it moved too. A moved board is listed in ``replaced`` as a new one
        is: state kept by GPU index outside these arrays (a trained offset) is another
        board's."""
        f = batch.frames[r]
        node = (f.cluster, f.node)
        before = {k: s for k, s in self.slot_of.items() if k[:2] == node}
        took = {before[(*node, m.src)] for m in moves
                if m.src is not None and (*node, m.src) in before}
        swap: dict[int, int] = {}
        for m in moves:
            key = (*node, batch.gpu_ids[r][m.position])
            old = self.slot_of.pop(key)
            parked = self._parked.get(key)
            src = (*node, m.src) if m.src is not None else None
            if src is not None and src in before:
                new = self.slot_of[key] = before[src]  # renumbered: the board's own state
                self.replaced.append(key)  # a trained offset of this index is another's
            elif m.back and parked is not None and parked[0] == m.new:
                new = self.slot_of[key] = parked[1]  # a board met again: its own state
            else:
                if parked is not None:  # a board left behind twice: forgotten
                    self._retired.append(parked[1])
                new = self._slot(key)
                self.replaced.append(key)
            if old not in took:
                if m.old:
                    self._parked[key] = (m.old, old)
                else:
                    self._retired.append(old)
            swap[old] = new
        for key, s in before.items():  # an index a board left, no board took: vacant
            if s in took and self.slot_of.get(key) == s and key not in {
                    (*node, batch.gpu_ids[r][m.position]) for m in moves}:
                del self.slot_of[key]
        self._nodes.pop(node, None)  # its cached slots name the old ones
        later = out[r:]  # this frame and those after it (time order) have the new boards
        was = later.copy()
        for old, new in swap.items():
            later[was == old] = new

    def _slot(self, key: Key) -> int:
        s = self.slot_of.get(key)
        if s is not None:
            return s
        if self._free:
            s = self._free.pop()
        else:
            s = self._next  # not len(slot_of): a replaced board's old slot is in neither
            self._next += 1
            size = len(next(iter(self.arrays.values())))
            if s >= size:
                for k, a in self.arrays.items():
                    grown = self._new(k, 2 * size)
                    grown[:size] = a
                    self.arrays[k] = grown
        self.slot_of[key] = s
        return s

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        self._boards.drop(gone)
        for key in [k for k in self._nodes if k[1] in gone]:
            del self._nodes[key]
        self._reset([self.slot_of.pop(key) for key in [k for k in self.slot_of
                                                       if k[1] in gone]])
        self._reset([self._parked.pop(key)[1] for key in [k for k in self._parked
                                                          if k[1] in gone]])

    def _reset(self, slots: list[int]) -> None:
        """Free these slots, their fields back to their initial values."""
        for s in slots:
            for name, a in self.arrays.items():
                a[s] = self._init[name]
            self._free.append(s)


@dataclass(slots=True)
class Arrival:
    """A batch in the order its frames were handed over: ``rows[i]`` is the batch row of
    the i-th frame handed over; wave k holds (in that order) the positions i of every
    node's k-th frame, so each GPU's samples come one wave after the other."""

    rows: np.ndarray
    waves: list[np.ndarray]


def arrival(frames: Sequence[Frame], batch: Batch) -> Arrival:
    if len(frames) == len(batch.frames) and all(map(is_, frames, batch.frames)):
        return Arrival(np.arange(len(frames)), batch.waves)  # handed over in time order
    row_of = {id(f): r for r, f in enumerate(batch.frames)}
    rows = np.fromiter((row_of[id(f)] for f in frames), np.int64, len(frames))
    return Arrival(rows, waves(frames))


def waves(frames: Sequence[Frame]) -> list[np.ndarray]:
    """Positions in ``frames`` of every node's first frame, then of its second, ..."""
    rank: dict[tuple[str, str], int] = {}
    ranks = []
    for f in frames:
        key = (f.cluster, f.node)
        r = rank.get(key, 0)
        rank[key] = r + 1
        ranks.append(r)
    rank_arr = np.asarray(ranks, np.int64)
    last = int(rank_arr.max()) if len(frames) else -1
    return [np.flatnonzero(rank_arr == k) for k in range(last + 1)]


def row_median(values: np.ndarray, use: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of (F, G) ``values``: the median of those where ``use`` holds and how many
    there are (NaN for none). As numpy's median, and as ``sorted`` and a sum from 0.0 would
    give it: the middle one, or the mean of the two middle ones (-0.0 comes out 0.0)."""
    n = use.sum(axis=1)
    if not values.shape[1]:
        return np.full(len(values), math.nan), n
    block = np.where(use, values, np.inf)
    block.sort(axis=1)
    lo = np.take_along_axis(block, np.maximum((n - 1) // 2, 0)[:, None], 1)[:, 0]
    hi = np.take_along_axis(block, (n // 2)[:, None], 1)[:, 0]
    with np.errstate(invalid="ignore"):
        return np.where(n > 0, ((0.0 + lo) + hi) / 2.0, math.nan), n


def node_rows(batch: Batch, cache: dict[tuple[str, str], tuple[tuple[int, ...], list[Any]]],
              make: Callable[[Frame, tuple[int, ...]], list[Any]], pad: Any,
              dtype: Any) -> np.ndarray:
    """(F, G): one row per frame of per-GPU values that ``make(frame, gpu_ids)`` gives once
    per node, kept in ``cache`` until the node's GPUs or the batch's width change;
    padded with ``pad`` where a frame has fewer GPUs than the batch."""
    width = batch.index.shape[1]
    out = []
    for f, ids in zip(batch.frames, batch.gpu_ids):
        known = cache.get((f.cluster, f.node))
        if known is None or known[0] != ids or len(known[1]) != width:
            known = cache[(f.cluster, f.node)] = (ids, make(f, ids) + [pad] * (width - len(ids)))
        out.append(known[1])
    return np.array(out, dtype).reshape(len(out), width)
