"""A batch of frames as arrays, and per-GPU state tables, for the detectors.

The processor runs every detector on every batch, so the detectors share one
pass over the frames: ``columns(frames)`` builds a (frame, GPU, metric) array
of the metrics the detectors read (NaN where a GPU does not report one) and
caches it for the next detector handed the same batch. Detectors then work on
whole waves of frames with numpy: wave k holds the k-th frame of each node in
the batch (in time order), so per-GPU state advances one sample at a time even
when a replay puts minutes of one node in a single batch. Statistics over a GPU's
peers in its frame are in ``fleetwatch.models.peer_stats``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, is_, itemgetter
from typing import NamedTuple

import numpy as np

from fleetwatch.frame import Frame, is_board_uuid
from fleetwatch.models import Finding

# The metrics any detector reads; the column index of each is ``COL[name]``.
METRICS: tuple[str, ...] = (
    "gpu_temp_c", "gpu_mem_temp_c", "gpu_slowdown_temp_c", "gpu_shutdown_temp_c",
    "gpu_power_w", "gpu_power_limit_w", "gpu_throttle_reasons", "gpu_sm_active_ratio",
    "gpu_util_pct", "gpu_sm_clock_mhz", "gpu_ecc_dbe_volatile_total",
    "gpu_ecc_dbe_aggregate_total", "gpu_retired_pages_dbe", "gpu_retired_pages_pending",
    "gpu_row_remap_pending", "gpu_row_remap_failure", "gpu_remapped_rows_uncorrectable",
    "gpu_pcie_replay_total", "gpu_nvlink_crc_errors_total", "gpu_nvlink_replay_errors_total",
    "gpu_nvlink_recovery_errors_total", "gpu_nvlink_links_down", "gpu_fan_pct",
    "gpu_ecc_sbe_volatile_total", "gpu_tensor_active_ratio", "gpu_dram_active_ratio",
    "gpu_retired_pages_sbe",
)
COL = {name: i for i, name in enumerate(METRICS)}
NAN = float("nan")


@dataclass(slots=True)
class Batch:
    """Frames in time order and their GPUs' metrics as arrays; F frames, G GPU positions."""

    frames: list[Frame]
    x: np.ndarray          # (F, G, len(METRICS)) float, NaN: absent or no GPU there
    present: np.ndarray    # (F, G) bool: a GPU reading is there (ok or lost)
    lost: np.ndarray       # (F, G) bool: state "lost"
    index: np.ndarray      # (F, G) int: the GPU's index, -1 where none
    job: np.ndarray        # (F, G) int: a code per job id in this batch, -1: no job
    model: np.ndarray      # (F, G) int: the GPU's model name is model_names[code]; -1: none
    model_names: list[str]
    ts: np.ndarray         # (F,) frame time
    waves: list[np.ndarray]  # frame rows, the k-th frame of each node in wave k
    gpu_ids: list[tuple[int, ...]]  # each frame's GPU indices, in position order
    # Each frame's GPU boards (UUIDs), in position order; "" where the frame names none
    # (no UUID, or a stand-in: ``is_board_uuid``). Shared by a node's frames while its
    # GPUs do not change, so that "the same boards" is an identity test.
    boards: list[tuple[str, ...]]

    def col(self, name: str) -> np.ndarray:
        return self.x[:, :, COL[name]]


# The last few batches built, newest first: the processor decodes (and the learned
# detectors' ``enrich`` reads) a batch or two ahead of the one its detectors judge.
_recent: list[tuple[Sequence[Frame], int, Batch, tuple[Frame, ...]]] = []
_RECENT = 4


def columns(frames: Sequence[Frame]) -> Batch:
    """The batch as arrays, built once per batch whichever detector asks first.

    A copy of a recent sequence with the same frame objects (another processor fed the
    same frames: ``fleetwatch evaluate`` runs one per detector set) gets the same arrays.
    """
    n = len(frames)
    # The cache holds the sequences and their frames, so no id can be reused while cached.
    for hit in _recent:
        if hit[1] == n and (hit[0] is frames or all(map(is_, frames, hit[3]))):
            return hit[2]
    batch = _build(frames)
    _recent.insert(0, (frames, n, batch, tuple(frames)))
    del _recent[_RECENT:]
    return batch


def _build(frames: Sequence[Frame]) -> Batch:
    """One pass over the batch, per frame where it can be (the per-GPU work is in C)."""
    ordered = sorted(frames, key=_ts)
    n = len(ordered)
    width = max((len(f.gpus) for f in ordered), default=0)
    idx_flat: list[int] = []
    job_flat: list[int] = []
    model_flat: list[int] = []
    lost_at: list[int] = []
    groups: dict[_Reader, tuple[list[int], list[Mapping[str, float]]]] = {}
    slow: list[int] = []
    global _model_names
    if len(_jobs) > _MAX_CACHED or len(_shapes) > _MAX_CACHED or len(_models) > _MAX_CACHED:
        _jobs.clear()
        _jobs[None] = -1
        _shapes.clear()
        _models.clear()
        _model_names = []  # a new list: batches built before keep theirs
    model_names = _model_names
    rank: dict[str, int] = {}
    ranks = []
    gpu_ids = []
    boards = []
    readers, shapes = _readers, _shapes
    for fi, f in enumerate(ordered):
        r = rank.get(f.node, 0)
        rank[f.node] = r + 1
        ranks.append(r)
        gpus = f.gpus
        k = len(gpus)
        # A node's GPUs, jobs and states rarely change between frames: decode them once.
        meta = tuple(map(_meta, gpus))
        shape = shapes.get(f.node)
        if shape is None or shape[0] != meta or len(shape[2]) != width:
            shape = shapes[f.node] = (meta, *_shape(meta, width))
        ids, padded_ids, codes, lost_js, model_codes, uuids = shape[1:]
        gpu_ids.append(ids)
        boards.append(uuids)
        idx_flat.extend(padded_ids)
        job_flat.extend(codes)
        model_flat.extend(model_codes)
        if lost_js:
            lost_at.extend(fi * width + j for j in lost_js)
        if not k:
            continue
        ms = [g.metrics for g in gpus]
        base = fi * width
        if len(set(map(len, ms))) > 1:
            # GPUs that report different sets (a lost GPU reports none): the first one's
            # getter would read only what it reports of the others. Read each by name.
            slow.extend(range(base, base + k))
            continue
        # Keyed by the metric count too: two processors fed the same frames, one of them
        # adding a derived metric (``enrich``), would otherwise rebuild it every batch.
        reader_key = (f.node, len(ms[0]))
        reader = readers.get(reader_key)
        if reader is None:
            reader = readers[reader_key] = _reader(ms[0])
        group = groups.get(reader)
        if group is None:
            group = groups[reader] = ([], [])
        group[0].extend(range(base, base + k))
        group[1].extend(ms)
    flat = np.full((n * width, len(METRICS)), NAN)
    for (get, cols), (where, dicts) in groups.items():
        if not cols:
            continue
        try:
            # One C loop over the group's GPUs: several times faster than np.array(values).
            block = np.fromiter(chain.from_iterable(map(get, dicts)), float,
                                len(dicts) * len(cols))
        except KeyError:
            # A GPU that lacks one of the metrics its node's first GPU reports: read
            # the others at speed and that one by name.
            keep: list[int] = []
            kept: list[Mapping[str, float]] = []
            for pos, m in zip(where, dicts):
                try:
                    get(m)
                except KeyError:
                    slow.append(pos)
                    continue
                keep.append(pos)
                kept.append(m)
            where, dicts = keep, kept
            block = np.fromiter(chain.from_iterable(map(get, dicts)), float,
                                len(dicts) * len(cols))
        flat[np.asarray(where, np.int64)[:, None], np.asarray(cols)] = \
            block.reshape(-1, len(cols))
    for pos in slow:
        m = ordered[pos // width].gpus[pos % width].metrics
        flat[pos] = [m.get(name, NAN) for name in METRICS]
    x = flat.reshape(n, width, len(METRICS))
    index = np.array(idx_flat, np.int64).reshape(n, width)
    job = np.array(job_flat, np.int64).reshape(n, width)
    model = np.array(model_flat, np.int64).reshape(n, width)
    lost = np.zeros(n * width, bool)
    lost[lost_at] = True
    lost = lost.reshape(n, width)
    ts = np.fromiter((f.ts for f in ordered), float, n)
    rank_arr = np.asarray(ranks, np.int64)
    last = int(rank_arr.max()) if n else -1
    waves = [np.arange(n)] if last == 0 else [np.flatnonzero(rank_arr == k)
                                              for k in range(last + 1)]
    return Batch(ordered, x, index >= 0, lost, index, job, model, model_names, ts, waves,
                 gpu_ids, boards)


def job_code(job: str) -> int:
    """The code a job id has in the batches ``columns`` makes now (-1: none seen since the
    codes were last renewed, so in no batch made since)."""
    return _jobs.get(job, -1)


def _ts(f: Frame) -> float:
    return f.ts


_meta = attrgetter("index", "job", "state", "model", "uuid")
_MAX_CACHED = 100_000
# Job id -> code, GPU model name -> code (its name is _model_names[code]), and per node its
# GPUs' (index, job, state, model, uuid) and what the batch needs of them.
_jobs: dict[str | None, int] = {None: -1}
_models: dict[str, int] = {}
_model_names: list[str] = []
_Meta = tuple[int, str | None, str, str, str]
_Shape = tuple[tuple[int, ...], list[int], list[int], list[int], list[int], tuple[str, ...]]
_shapes: dict[str, tuple[tuple[_Meta, ...], tuple[int, ...], list[int], list[int], list[int],
                         list[int], tuple[str, ...]]] = {}


def _shape(meta: tuple[_Meta, ...], width: int) -> _Shape:
    ids = tuple([m[0] for m in meta])
    pad = [-1] * (width - len(meta))
    codes = [_jobs.setdefault(m[1], len(_jobs) - 1) for m in meta]
    lost = [j for j, m in enumerate(meta) if m[2] != "ok"]
    uuids = tuple([m[4] if is_board_uuid(m[4]) else "" for m in meta])
    return (ids, list(ids) + pad, codes + pad, lost, [_model_code(m[3]) for m in meta] + pad,
            uuids)


def _model_code(name: str) -> int:
    code = _models.get(name)
    if code is None:
        code = _models[name] = len(_model_names)
        _model_names.append(name)
    return code


# Per node: a C-speed getter of the detectors' metrics that this node's GPUs report, and
# their columns; nodes that report the same columns share one, so a batch reads each set of
# them in one pass. One agent and one driver per node make its GPUs report the same metrics;
# a GPU that lacks one (KeyError) or reports a different count is read the slow way or gets
# its own getter. Bounded like the codec's caches.
_Reader = tuple[Callable[[Mapping[str, float]], tuple[float, ...]], tuple[int, ...]]
_readers: dict[tuple[str, int], _Reader] = {}
_by_cols: dict[tuple[int, ...], _Reader] = {}
_MAX_READERS = 20_000


def _reader(m: Mapping[str, float]) -> _Reader:
    if len(_readers) >= _MAX_READERS:
        _readers.clear()
        _by_cols.clear()
    cols = tuple(i for i, name in enumerate(METRICS) if name in m)
    known = _by_cols.get(cols)
    if known is not None:
        return known
    names = [METRICS[i] for i in cols]
    if not names:
        get: Callable[[Mapping[str, float]], tuple[float, ...]] = lambda _m: ()  # noqa: E731
    elif len(names) == 1:
        one = itemgetter(names[0])
        get = lambda mm: (one(mm),)  # noqa: E731
    else:
        get = itemgetter(*names)
    reader = _by_cols[cols] = (get, cols)
    return reader


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


def throttle_bits(reasons: np.ndarray) -> np.ndarray:
    """NVML's throttle-reason bits as integers (``gpu_throttle_reasons``; not read: none)."""
    return np.where(np.isfinite(reasons), reasons, 0).astype(np.int64)


def ewma_weight(dt: np.ndarray, tau: float) -> np.ndarray:
    """The weight of a new sample after ``dt`` seconds in an average with time constant tau."""
    return -np.expm1(-np.clip(dt, 0.0, None) / tau)


def gpu_finding(frame: Frame, gpu: int, rule: str, value: float, message: str, severity: str,
                for_s: float, evidence: dict[str, float], action: str,
                hold_s: float = 0.0) -> Finding:
    """A GPU-scope finding at the frame's time, evidence rounded for people to read.

    Evidence a GPU did not report (NaN) is left out: sinks speak JSON, which has no NaN.
    """
    return Finding(rule, frame.cluster, frame.rack, frame.node, gpu, frame.ts, float(value),
                   message, severity, for_s, hold_s,
                   {k: round(float(v), 3) for k, v in evidence.items() if math.isfinite(v)},
                   action, "gpu")


def flagged(mask: np.ndarray) -> list[tuple[int, int]]:
    """(row, position) pairs where ``mask`` (F, G) holds: the few GPUs that get a finding."""
    if not mask.any():
        return []
    return [(int(i), int(j)) for i, j in zip(*np.nonzero(mask))]


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
