"""Per-GPU state the detectors keep between batches: which board each GPU slot holds
(``Boards``), state arrays indexed by slot (``GpuTable``), and the detector base whose
state is such a table (``WaveDetector``, judged wave by wave)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import NamedTuple

import numpy as np

from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.batch import Batch, columns


class Move(NamedTuple):
    """Another board in a GPU slot: the frame's position of the GPU, the board before and
    the one now, and whether that one is the slot's board before the old (``back``: two
    machines under one node name alternating, or a board swapped back), which keeps
    its own state instead of starting afresh."""

    position: int
    old: str
    new: str
    back: bool


class Boards:
    """The board (UUID) each GPU slot of a node was last seen with: which frames name
    another board in a slot, so that a detector forgets what it learned of the old board
    (its offset, its counters) instead of judging the new one by it, and which name the
    board the slot held before (``Move.back``), whose own state the detector takes back.

    A frame that names no board there (no UUID, or a stand-in) changes nothing, and
    neither does a slot's first board.
    """

    def __init__(self) -> None:
        # (cluster, node) -> (the boards tuple last seen, GPU index -> its board, GPU
        # index -> the board it held before that one)
        self._seen: dict[tuple[str, str],
                         tuple[tuple[str, ...], dict[int, str], dict[int, str]]] = {}

    def changed(self, f: Frame, ids: tuple[int, ...], boards: tuple[str, ...]) -> list[Move]:
        """The frame's GPUs whose board is another than the one seen before.

        Per frame; the usual case (a node's GPUs unchanged: the batch shares one tuple
        among its frames) is one identity test."""
        key = (f.cluster, f.node)
        seen = self._seen.get(key)
        if seen is not None and seen[0] is boards:
            return _NONE
        known, before = (seen[1], seen[2]) if seen is not None else ({}, {})
        out = []
        for j, (g, uuid) in enumerate(zip(ids, boards)):
            if uuid:
                was = known.get(g)
                if was != uuid:
                    if was:
                        out.append(Move(j, was, uuid, before.get(g) == uuid))
                        before[g] = was
                    known[g] = uuid
        self._seen[key] = (boards, known, before)
        return out

    def replaced(self, batch: Batch) -> list[tuple[int, Move]]:
        """(row, move) of the batch's GPUs that another board holds than before, in the
        batch's (time) order."""
        out: list[tuple[int, Move]] = []
        seen, changed = self._seen, self.changed
        for r, (f, ids, boards) in enumerate(zip(batch.frames, batch.gpu_ids, batch.boards)):
            last = seen.get((f.cluster, f.node))
            if last is None or last[0] is not boards:
                out.extend((r, m) for m in changed(f, ids, boards))
        return out

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self._seen if k[1] in gone]:
            del self._seen[key]


_NONE: list[Move] = []


class GpuTable:
    """Per-GPU state arrays indexed by slot, and the (node, GPU index) -> slot map.

    ``fields`` gives each array's initial value; a slot's arrays are reset to
    them when a node is dropped (its partition went to another processor). A GPU whose
    board was replaced (``Boards``) gets a new slot from the frame that names the new
    board on: nothing learned of the old board carries over. The old slot is kept for
    the old board while it is the slot's board before the new one: a board that comes
    back (two machines under one node name, alternating; a board swapped back) takes its
    own state back, so each board is judged on its own. A slot of a board left behind
    twice is freed at the next batch, once the frames before have been judged with it.
    Nodes are told apart by cluster and name.
    """

    def __init__(self, **fields: float) -> None:
        self._init = fields
        # Per node: its GPU indices, their slots (padded to the batch's width), the boards
        # its last frame named (None: not looked at since the slots changed).
        self._nodes: dict[tuple[str, str],
                          tuple[tuple[int, ...], list[int], tuple[str, ...] | None]] = {}
        # (cluster, node, GPU index) -> (the board the slot held before, its slot)
        self._parked: dict[tuple[str, str, int], tuple[str, int]] = {}
        self._free: list[int] = []
        self._boards = Boards()
        self._retired: list[int] = []  # slots of replaced boards, freed at the next batch
        self._next = 0
        self.node_of: list[str] = []
        self.arrays: dict[str, np.ndarray] = {k: np.full(64, v) for k, v in fields.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def slots(self, batch: Batch) -> np.ndarray:
        """(F, G) slots of the batch's GPUs; -1 where there is no GPU."""
        width = batch.index.shape[1]
        out = []
        nodes = self._nodes
        if self._retired:
            self._release(self._retired)
            self._retired = []
        changed = self._boards.changed
        for f, gpus, boards in zip(batch.frames, batch.gpu_ids, batch.boards):
            key = (f.cluster, f.node)
            known = nodes.get(key)
            if known is None or known[0] != gpus:
                slots = self._assign(f.node, gpus, known)
                known = (gpus, slots + [-1] * (width - len(slots)), None)
            elif len(known[1]) != width:
                known = (gpus, known[1][:len(gpus)] + [-1] * (width - len(gpus)), None)
            if known[2] is not boards:  # else the boards this node's last frame named
                replaced = changed(f, gpus, boards)
                known = nodes[key] = (gpus, self._renew(key, gpus, known[1], replaced)
                                      if replaced else known[1], boards)
            out.append(known[1])
        return np.fromiter(chain.from_iterable(out), np.int64, len(out) * width).reshape(
            len(out), width)

    def _assign(self, node: str, gpus: tuple[int, ...],
                old: tuple[tuple[int, ...], list[int], tuple[str, ...] | None] | None
                ) -> list[int]:
        kept = dict(zip(old[0], old[1])) if old else {}
        slots = []
        for g in gpus:
            s = kept.pop(g, None)
            if s is None:
                s = self._new_slot(node)
            slots.append(s)
        self._release(kept.values())
        return slots

    def _renew(self, key: tuple[str, str], gpus: tuple[int, ...], slots: list[int],
               moves: list[Move]) -> list[int]:
        """The node's slots with, at each position whose board changed, the new board's
        own (one that comes back) or a fresh one; the old board's kept for it."""
        slots = list(slots)  # rows before this frame keep the old one
        for m in moves:
            gpu = (*key, gpus[m.position])
            parked = self._parked.get(gpu)
            if m.back and parked is not None and parked[0] == m.new:
                s = parked[1]
            else:
                if parked is not None:  # a board left behind twice: forgotten
                    self._retired.append(parked[1])
                s = self._new_slot(key[1])
            self._parked[gpu] = (m.old, slots[m.position])
            slots[m.position] = s
        return slots

    def _new_slot(self, node: str) -> int:
        if self._free:
            s = self._free.pop()
            self.node_of[s] = node
            return s
        s = self._next
        self._next += 1
        self.node_of.append(node)
        if s >= len(next(iter(self.arrays.values()), ())):
            for k, a in self.arrays.items():
                grown = np.full(2 * len(a), self._init[k])
                grown[:len(a)] = a
                self.arrays[k] = grown
        return s

    def _release(self, slots: Iterable[int]) -> None:
        for s in slots:
            for k, a in self.arrays.items():
                a[s] = self._init[k]
            self.node_of[s] = ""
            self._free.append(s)

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        self._boards.drop(gone)
        for key in [k for k in self._nodes if k[1] in gone]:
            self._release(s for s in self._nodes.pop(key)[1] if s >= 0)
        for gpu in [k for k in self._parked if k[1] in gone]:
            self._release([self._parked.pop(gpu)[1]])

    @property
    def used(self) -> int:
        return self._next



class WaveDetector:
    """A detector whose per-GPU state is a ``GpuTable``: a batch is judged wave by wave
    (``_wave``: one frame of each node at a time, in time order)."""

    table: GpuTable

    def drop(self, nodes: Iterable[str]) -> None:
        self.table.drop(nodes)

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        b = columns(frames)
        out: list[Finding] = []
        if not b.frames:
            return out
        slots = self.table.slots(b)
        for rows in b.waves:
            self._wave(b, rows, slots[rows], out)
        return out

    def _wave(self, b: Batch, rows: np.ndarray, slots: np.ndarray,
              out: list[Finding]) -> None:
        raise NotImplementedError
