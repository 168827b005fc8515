"""The fleet's history as per-minute grids, from a store or from frames in memory.

``read_day`` reads one chunk (a day) of one-minute means of the metrics the
learned models use from any store; ``FrameDays`` builds the same grids from
frames without a store (``fleetwatch evaluate``, the benchmarks). Training
(``fleetwatch.train``) turns them into features and fits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetwatch.pipeline.store.base import MINUTE_MS, RAW_SPAN_MS, Store, gpu_index

GPU_METRICS: tuple[str, ...] = (
    "gpu_temp_c", "gpu_power_w", "gpu_sm_active_ratio", "gpu_util_pct", "gpu_sm_clock_mhz",
    "gpu_fan_pct", "gpu_power_limit_w", "gpu_slowdown_temp_c", "gpu_ecc_sbe_volatile_total",
    "gpu_pcie_replay_total", "gpu_nvlink_crc_errors_total")
CHUNK_S = 86400.0


@dataclass
class Day:
    """One chunk of history: per GPU and minute, the mean of each metric (NaN: absent)."""

    gpus: list[tuple[str, str, str, int]]          # (cluster, rack, node, gpu)
    minutes: np.ndarray                             # minute start, ms
    values: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> (gpus, minutes)
    inlet: np.ndarray | None = None                 # host_inlet_temp_c per GPU's node


def read_day(store: Store, start_ms: int, end_ms: int) -> Day:
    """Minute means of ``GPU_METRICS`` of the minutes that start in [start, end), whatever
    span the store returns (a minute is whole: all its samples, as the store rolled it up)."""
    first = -(-start_ms // MINUTE_MS) * MINUTE_MS
    minutes = np.arange(first, end_ms, MINUTE_MS, dtype=np.int64)
    names = (*GPU_METRICS, "host_inlet_temp_c")
    bulk = getattr(store, "minute_means", None)
    if bulk is not None:  # one pass over the rollups (the SQLite store)
        series = bulk(names, first, end_ms)
    else:
        # Ask for more than RAW_SPAN_MS so that every backend answers with its minute means.
        q_start = min(first, end_ms - RAW_SPAN_MS - MINUTE_MS)
        series = {m: _by_series(store.range(m, q_start, end_ms)) for m in names}
    index: dict[tuple[str, str, str, int], int] = {}
    cells: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {m: [] for m in names}
    inlets: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    for metric in names:
        for key, ts, values in series.get(metric, []):
            keep = ts >= first
            m = (ts[keep] - first) // MINUTE_MS
            if metric == "host_inlet_temp_c":
                inlets.setdefault((key.cluster, key.node), []).append((m, values[keep]))
                continue
            gpu = gpu_index(key.device)
            if gpu is None:
                continue
            i = index.setdefault((key.cluster, key.rack, key.node, gpu), len(index))
            cells[metric].append((i, m, values[keep]))
    day = Day(list(index), minutes)
    shape = (len(index), len(minutes))
    for metric in GPU_METRICS:
        day.values[metric] = _grid(cells[metric], shape)
    day.inlet = _grid([(i, m, v) for i, (c, _, n, _) in enumerate(day.gpus)
                       for m, v in inlets.get((c, n), [])], shape)
    return ordered(day)


def _by_series(points: Iterable[tuple[Any, int, float]]
               ) -> list[tuple[Any, np.ndarray, np.ndarray]]:
    """A store's (key, ts, value) points as (key, timestamps, values) per series."""
    grouped: dict[Any, tuple[list[int], list[float]]] = {}
    for key, ts, value in points:
        t, v = grouped.setdefault(key, ([], []))
        t.append(ts)
        v.append(value)
    return [(k, np.asarray(t, dtype=np.int64), np.asarray(v, dtype=float))
            for k, (t, v) in grouped.items()]


def ordered(day: Day) -> Day:
    """The day with its GPUs in sorted order: the fit does not depend on where the rows
    came from (a store's series order, or the order frames arrived in)."""
    order = sorted(range(len(day.gpus)), key=day.gpus.__getitem__)
    return Day([day.gpus[i] for i in order], day.minutes,
               {m: v[order] for m, v in day.values.items()},
               None if day.inlet is None else day.inlet[order])


def _grid(cells: Sequence[tuple[int, np.ndarray, np.ndarray]], shape: tuple[int, int]
          ) -> np.ndarray:
    """Mean of the values that fall in each (row, minute) cell; NaN where none. ``cells``:
    (row, minute indices, values) per series."""
    size = shape[0] * shape[1]
    total = np.zeros(size)
    count = np.zeros(size)
    if cells:
        r = np.concatenate([np.full(len(m), i) for i, m, _ in cells]).astype(int)
        m = np.concatenate([m for _, m, _ in cells]).astype(int)
        v = np.concatenate([v for _, _, v in cells])
        ok = (m >= 0) & (m < shape[1]) & (r < shape[0]) & ~np.isnan(v)
        flat = r[ok] * shape[1] + m[ok]  # bincount sums in order, as np.add.at does, faster
        total = np.bincount(flat, weights=v[ok], minlength=size).astype(float)
        count = np.bincount(flat, minlength=size).astype(float)
    total, count = total.reshape(shape), count.reshape(shape)
    with np.errstate(invalid="ignore"):
        return _settled(np.where(count > 0, total / np.maximum(count, 1), math.nan))


def _settled(means: np.ndarray) -> np.ndarray:
    """Minute means to 1e-9: backends (and frames in memory) sum a minute's samples in
    their own order, which moves the last bit, and a gradient-boosted fit splits on exact
    values: rounded, the same history gives the same model wherever it was read from."""
    return np.round(means, 9)



class FrameDays:
    """Per-minute ``Day`` grids built from frames in memory, without a store.

    The same grids ``read_day`` reads from a store that was written those
    frames: each cell is the mean of the samples of one GPU (or, for the inlet,
    one node) whose timestamp falls in that minute, as the stores' one-minute
    rollups are. The minutes are those that start in [start, end), each whole
    (``read_day``'s rule). Frames may come in any batches; others are ignored.
    Memory: two float arrays per metric, GPUs x minutes of one chunk.
    """

    def __init__(self, start_ts: float, end_ts: float) -> None:
        self.first = -(-int(start_ts * 1000) // MINUTE_MS) * MINUTE_MS
        self.minutes = np.arange(self.first, int(end_ts * 1000), MINUTE_MS, dtype=np.int64)
        self.end_ms = self.first + len(self.minutes) * MINUTE_MS  # the last minute, whole
        self._index: dict[tuple[str, str, str, int], int] = {}
        self._last_rows: tuple[list[tuple[str, str, str, int]], np.ndarray] | None = None
        self._cap = 0
        names = (*GPU_METRICS, "host_inlet_temp_c")
        self._sum = {m: np.zeros((0, len(self.minutes))) for m in names}
        self._n = {m: np.zeros((0, len(self.minutes)), dtype=np.int32) for m in names}

    def _rows(self, idents: list[tuple[str, str, str, int]]) -> list[int]:
        index = self._index
        rows = [index.setdefault(i, len(index)) for i in idents]
        if len(index) > self._cap:
            self._cap = max(len(index), 2 * self._cap, 64)
            for d in (self._sum, self._n):
                for m, a in d.items():
                    grown = np.zeros((self._cap, a.shape[1]), dtype=a.dtype)
                    grown[:len(a)] = a
                    d[m] = grown
        return rows

    def add(self, frames: Sequence[Any]) -> None:
        keep = [f for f in frames if f.gpus and self.first <= int(f.ts * 1000) < self.end_ms]
        if not keep:
            return
        gpus = [g for f in keep for g in f.gpus]
        rows = np.asarray(self._rows([(f.cluster, f.rack, f.node, g.index)
                                      for f in keep for g in f.gpus]))
        minute = np.repeat([(int(f.ts * 1000) - self.first) // MINUTE_MS for f in keep],
                           [len(f.gpus) for f in keep])
        nan = math.nan
        vals = np.array([[g.metrics.get(m, nan) for m in GPU_METRICS] for g in gpus], float)
        inlet = np.repeat([f.host.metrics.get("host_inlet_temp_c", nan) for f in keep],
                          [len(f.gpus) for f in keep])
        # The node's inlet sensor is kept on each of its GPUs' rows (as read_day does).
        for m, col in zip((*GPU_METRICS, "host_inlet_temp_c"), (*vals.T, inlet)):
            ok = ~np.isnan(col)
            np.add.at(self._sum[m], (rows[ok], minute[ok]), col[ok])
            np.add.at(self._n[m], (rows[ok], minute[ok]), 1)

    def add_samples(self, ts: float, idents: list[tuple[str, str, str, int]],
                    values: dict[str, np.ndarray], inlet: np.ndarray) -> None:
        """``add`` for one instant given as arrays (``collectors.sim.frames.gpu_samples``):
        each GPU's metrics (NaN: absent), its node's inlet. The same grids as ``add`` of
        the frames these samples would be: one sample per GPU, added to its cell."""
        if not idents or not self.first <= int(ts * 1000) < self.end_ms:
            return
        if self._last_rows is None or self._last_rows[0] != idents:  # the same GPUs, mostly
            self._last_rows = (idents, np.asarray(self._rows(idents)))
        rows = self._last_rows[1]
        minute = (int(ts * 1000) - self.first) // MINUTE_MS
        nan = np.full(len(idents), math.nan)
        for m in (*GPU_METRICS, "host_inlet_temp_c"):
            col = inlet if m == "host_inlet_temp_c" else values.get(m, nan)
            ok = ~np.isnan(col)
            self._sum[m][rows[ok], minute] += col[ok]
            self._n[m][rows[ok], minute] += 1

    def days(self, chunk_s: float = CHUNK_S) -> Iterator[Day]:
        """The grids cut in chunks of ``chunk_s``, as ``train`` reads a store."""
        per = max(1, int(chunk_s * 1000) // MINUTE_MS)
        n = len(self._index)
        gpus = list(self._index)
        for a in range(0, len(self.minutes), per):
            cols = slice(a, a + per)
            with np.errstate(invalid="ignore", divide="ignore"):
                grid = {m: _settled(np.where(self._n[m][:n, cols] > 0, self._sum[m][:n, cols]
                                             / np.maximum(self._n[m][:n, cols], 1), math.nan))
                        for m in self._sum}
            seen = ~np.isnan(np.stack([grid[m] for m in GPU_METRICS])).all(axis=(0, 2))
            keep = np.flatnonzero(seen)  # a store has no series for a GPU absent all chunk
            day = Day([gpus[i] for i in keep], self.minutes[cols],
                      {m: grid[m][keep] for m in GPU_METRICS}, grid["host_inlet_temp_c"][keep])
            yield ordered(day)
