"""A batch of frames as arrays, for the detectors.

The processor runs every detector on every batch, so the detectors share one
pass over the frames: ``columns(frames)`` builds a (frame, GPU, metric) array
of the metrics the detectors read (NaN where a GPU does not report one) and
caches it for the next detector handed the same batch. Detectors then work on
whole waves of frames with numpy: the batch's frames in time order, cut where a
node's next frame comes (or after a pause of ``SAME_TIME_S``), so per-GPU state
advances one sample at a time even when a replay puts minutes of one node in a single
batch, and the nodes' frames of one time share a wave. A backlog read unevenly (some
partitions minutes behind others) puts minutes of some nodes beside minutes of others
in one batch: wave k as each node's k-th frame put frames minutes apart together.
Where a wave still spans more than ``SAME_TIME_S`` (partitions each at its own lag,
their frames interleaved), ``peer_rack`` compares a GPU only with those close to its own.
Statistics over a GPU's peers in its frame are in
``fleetwatch.models.peer_stats``; per-GPU state kept between batches (boards, slots,
``WaveDetector``) in ``fleetwatch.models.gpu_slots``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, is_, itemgetter

import numpy as np

from fleetwatch.frame import Frame, is_board_uuid
from fleetwatch.models import KEEP_FIRING, Finding

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
    "gpu_retired_pages_sbe", "gpu_energy_j",
)
COL = {name: i for i, name in enumerate(METRICS)}
NAN = float("nan")
# Frames of different nodes less than this far apart are of one time: a GPU is compared
# with other nodes' GPUs (``peer_rack``) only in frames that close to its own, and a
# batch's frames this far apart with none in between start a new wave. Such peers are
# settled (power within peer_power_tol_w, 60 W, of its lagged value), so a peer's heat
# sink is within about 0.1 °C/W x 60 W = 6 °C of where its power takes it and gets there
# through a time constant of 23 to 30 s (thermal_tau_s): at most about 0.2 °C/s, one
# reading's whole degree in 5 s, the agents' usual interval, while the air moves by
# degrees an hour. Minutes apart, a whole fleet can warm by 15 °C (a job starting on
# every node after maintenance).
SAME_TIME_S = 5.0


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
    waves: list[np.ndarray]  # frame rows in time order, a node's next frame in a later wave
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
    # Waves in time order: a frame joins the wave being filled unless its node already has
    # a frame there, or it comes SAME_TIME_S or more after the frame before it (the next
    # scrape of nodes that report together): either starts the next wave.
    # (cluster, node) -> the last wave it is in.
    wave_of: dict[tuple[str, str], int] = {}
    wave = 0
    before = ordered[0].ts if n else 0.0
    in_wave = []
    gpu_ids = []
    boards = []
    readers, shapes = _readers, _shapes
    for fi, f in enumerate(ordered):
        key = (f.cluster, f.node)
        if wave_of.get(key) == wave or f.ts - before >= SAME_TIME_S:
            wave += 1
        wave_of[key] = wave
        before = f.ts
        in_wave.append(wave)
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
    # Each wave is a run of rows: the frames are in time order.
    waves = [] if not n else [np.arange(n)] if wave == 0 else np.split(
        np.arange(n), np.flatnonzero(np.diff(np.asarray(in_wave, np.int64))) + 1)
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


# A GPU's part: its model name without the memory size, so that boards that differ only
# in memory (an A100-SXM4-40GB beside A100-SXM4-80GBs: the same clocks and heat path) are
# each other's peers, while an A100 and an H100 are not.
_MEMORY = re.compile(r"[- ]?\b\d+\s?GB\b", re.IGNORECASE)
_part_codes: list[int] = []   # model code -> part code
_parts: dict[str, int] = {}


def part_of(name: str) -> str:
    return " ".join(_MEMORY.sub("", name).split())


def parts(model: np.ndarray) -> np.ndarray:
    """The part codes of an array of model codes (-1 where there is no GPU)."""
    for name in _model_names[len(_part_codes):]:
        _part_codes.append(_parts.setdefault(part_of(name), len(_parts)))
    return np.asarray([*_part_codes, -1], dtype=np.int64)[model]


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


def thermal_keep(keep_firing_s: float) -> dict[str, float]:
    """The evidence that makes a thermal alert keep firing ``keep_firing_s`` once clear
    (``detectors.thermal_keep_firing_s``); none for 0, which leaves alerts.keep_firing_s."""
    return {KEEP_FIRING: keep_firing_s} if keep_firing_s > 0 else {}


def flagged(mask: np.ndarray) -> list[tuple[int, int]]:
    """(row, position) pairs where ``mask`` (F, G) holds: the few GPUs that get a finding."""
    if not mask.any():
        return []
    return [(int(i), int(j)) for i, j in zip(*np.nonzero(mask))]
