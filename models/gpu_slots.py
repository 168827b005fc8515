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
    the one now ("" before: none), and whether that one is the slot's board before the old
    (``back``: two machines under one node name alternating, or a board swapped back),
    which keeps its own state instead of starting afresh; ``src``: the GPU index the new
    board was at before (NVML numbered the node's GPUs otherwise: a board missing, a
    firmware change), whose state it takes with it (None: a board new to the node)."""

    position: int
    old: str
    new: str
    back: bool
    src: int | None = None


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
        prior = {uuid: g for g, uuid in known.items()}
        out = []
        for j, (g, uuid) in enumerate(zip(ids, boards)):
            if uuid:
                was = known.get(g)
                if was != uuid:
                    src = prior.get(uuid)
                    if was or src is not None:
                        out.append(Move(j, was or "", uuid, before.get(g) == uuid, src))
                        if was:
                            before[g] = was
                    known[g] = uuid
        if out and any(m.src is not None for m in out):  # an index the board left
            here = set(ids)
            for g in [g for g, uuid in known.items() if g not in here and uuid in boards]:
                del known[g]
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

    ``fields`` gives each array's initial value (``shapes``: the shape of a field that
    holds more than one value per GPU); a slot's arrays are reset to
    them when a node is dropped (its partition went to another processor). A GPU whose
    board was replaced (``Boards``) gets a new slot from the frame that names the new
    board on: nothing learned of the old board carries over. The old slot is kept for
    the old board while it is the slot's board before the new one: a board that comes
    back (two machines under one node name, alternating; a board swapped back) takes its
    own state back, so each board is judged on its own. A slot of a board left behind
    twice is freed at the next batch, once the frames before have been judged with it.
    Nodes are told apart by cluster and name.
    """

    def __init__(self, shapes: dict[str, tuple[int, ...]] | None = None,
                 **fields: float) -> None:
        self._init = fields
        self._shapes = dict(shapes or {})  # of a field that holds more than one value a GPU
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
        self.arrays: dict[str, np.ndarray] = {
            k: np.full((64, *self._shapes.get(k, ())), v) for k, v in fields.items()}

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
            last = known
            spare: dict[int, int] = {}
            if known is None or known[0] != gpus:
                slots, spare = self._assign(f.node, gpus, known)
                known = (gpus, slots + [-1] * (width - len(slots)), None)
            elif len(known[1]) != width:
                known = (gpus, known[1][:len(gpus)] + [-1] * (width - len(gpus)), None)
            if known[2] is not boards:  # else the boards this node's last frame named
                replaced = changed(f, gpus, boards)
                prev = dict(zip(last[0], last[1])) if replaced and last is not None else {}
                known = nodes[key] = (gpus, self._renew(key, gpus, known[1], replaced, prev,
                                                        spare)
                                      if replaced else known[1], boards)
            if spare:
                self._release(spare.values())
            out.append(known[1])
        return np.fromiter(chain.from_iterable(out), np.int64, len(out) * width).reshape(
            len(out), width)

    def _assign(self, node: str, gpus: tuple[int, ...],
                old: tuple[tuple[int, ...], list[int], tuple[str, ...] | None] | None
                ) -> tuple[list[int], dict[int, int]]:
        """The slots of the node's GPU indices (a new index, a fresh one), and those of the
        indices gone, for the caller to release once a board that moved took its own."""
        kept = {g: s for g, s in zip(old[0], old[1]) if s >= 0} if old else {}
        slots = []
        for g in gpus:
            s = kept.pop(g, None)
            if s is None:
                s = self._new_slot(node)
            slots.append(s)
        return slots, kept

    def _renew(self, key: tuple[str, str], gpus: tuple[int, ...], slots: list[int],
               moves: list[Move], prev: dict[int, int], spare: dict[int, int]) -> list[int]:
        """The node's slots with, at each position whose board changed, the board's own:
        the slot of the index it was at (``Move.src``: renumbered), the one it left (it
        comes back) or a fresh one; the old board's kept for it unless it moved too.
        ``prev``: GPU index -> slot before this frame; ``spare``: slots of indices gone,
        less those a board moving from there takes."""
        slots = list(slots)  # rows before this frame keep the old one
        took = {prev[m.src] for m in moves if m.src is not None and prev.get(m.src, -1) >= 0}
        for g in [g for g, s in spare.items() if s in took]:
            del spare[g]
        for m in moves:
            gpu = (*key, gpus[m.position])
            parked = self._parked.get(gpu)
            old = slots[m.position]
            if m.src is not None and prev.get(m.src, -1) >= 0:
                s = prev[m.src]
            elif m.back and parked is not None and parked[0] == m.new:
                s = parked[1]
            else:
                if parked is not None:  # a board left behind twice: forgotten
                    self._retired.append(parked[1])
                s = self._new_slot(key[1])
            if old >= 0 and old not in took and old != s:
                if m.old:  # kept for the board that left, if it comes back
                    if parked is not None and parked[1] != s and m.src is not None:
                        self._retired.append(parked[1])
                    self._parked[gpu] = (m.old, old)
                else:
                    self._retired.append(old)
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
                grown = np.full((2 * len(a), *a.shape[1:]), self._init[k])
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
