"""``fleetwatch train``: fit the learned detectors on the fleet's own history.

Reads one-minute means of the metrics the models use from any store (the
embedded one or the production one, through the ``Store`` protocol), a day at
a time so memory stays bounded, fits the thermal-health regressor, the
per-phase anomaly forests and the lemon-node scores, and writes one versioned
model file (``models/artifact.py``) that running processors pick up without a
restart. Training is a command, never part of the processor's hot path.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fleetwatch.models.anomaly import INPUTS, WINDOW_MIN, fit_anomaly, window_features
from fleetwatch.models.artifact import ModelSet, save
from fleetwatch.models.lemon import DEFAULT_XID_POINTS, lost_points
from fleetwatch.models.thermal_model import FEATURES, fit_thermal, gpu_key
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


def _node_groups(day: Day) -> list[np.ndarray]:
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (c, _, n, _) in enumerate(day.gpus):
        groups.setdefault((c, n), []).append(i)
    return [np.asarray(v) for v in groups.values()]


def _node_medians(day: Day) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU-minute, the median temperature and power of its node's GPUs that minute
    (``thermal_health.node_median``, for every minute at once; NaN under two readings)."""
    temp, power = day.values["gpu_temp_c"], day.values["gpu_power_w"]
    out = (np.full(temp.shape, math.nan), np.full(temp.shape, math.nan))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN minutes stay NaN
        for rows in _node_groups(day):
            for src, dst in ((temp, out[0]), (power, out[1])):
                block = src[rows]
                med = np.nanmedian(block, axis=0)
                dst[rows] = np.where((~np.isnan(block)).sum(axis=0) >= 2, med, math.nan)
    return out


def thermal_rows(day: Day, every: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                     np.ndarray]:
    """(X in FEATURES order, die temperature, GPU key, minute) of every GPU-minute with both."""
    X, y, gi, minutes = _thermal_rows(day, every)
    return X, y, np.asarray(_gpu_keys(day) or [""])[gi], minutes


def _gpu_keys(day: Day) -> list[str]:
    return [gpu_key(c, n, g) for c, _, n, g in day.gpus]


def _thermal_rows(day: Day, every: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                 np.ndarray]:
    """``thermal_rows`` with each row's GPU as its row in ``day.gpus``: a week of a fleet
    is millions of rows, and a key string per row costs memory and a string sort."""
    v = day.values
    temp = v["gpu_temp_c"]
    node_temp, node_power = _node_medians(day)
    sm = np.where(np.isnan(v["gpu_sm_active_ratio"]), v["gpu_util_pct"] / 100.0,
                  v["gpu_sm_active_ratio"])
    cols = [v["gpu_power_w"], sm, v["gpu_sm_clock_mhz"], v["gpu_fan_pct"], node_temp, node_power,
            day.inlet if day.inlet is not None else np.full(temp.shape, math.nan),
            v["gpu_power_limit_w"], v["gpu_slowdown_temp_c"]]
    assert len(cols) == len(FEATURES)
    ok = ~np.isnan(temp) & ~np.isnan(v["gpu_power_w"])
    ok[:, (np.arange(temp.shape[1]) % every) != 0] = False
    gi, mi = np.nonzero(ok)
    X = np.stack([c[gi, mi] for c in cols], axis=1)
    return X, temp[gi, mi], gi.astype(np.int32), day.minutes[mi]


def anomaly_windows(day: Day) -> np.ndarray:
    """Feature rows (anomaly.FEATURES) of every whole ten-minute window of every GPU."""
    v = day.values
    temp, power = v["gpu_temp_c"], v["gpu_power_w"]
    sm = np.where(np.isnan(v["gpu_sm_active_ratio"]), v["gpu_util_pct"] / 100.0,
                  v["gpu_sm_active_ratio"])
    node_temp = np.full(temp.shape, math.nan)
    node_power = np.full(temp.shape, math.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN minutes stay NaN
        for rows in _node_groups(day):
            node_temp[rows] = np.nanmedian(temp[rows], axis=0)
            node_power[rows] = np.nanmedian(power[rows], axis=0)
        errors = np.nansum([v[m] for m in ("gpu_ecc_sbe_volatile_total",
                                           "gpu_pcie_replay_total",
                                           "gpu_nvlink_crc_errors_total")], axis=0)
    growth = np.zeros(temp.shape)
    growth[:, 1:] = np.clip(np.diff(errors, axis=1), 0, None)
    stack = np.stack([temp, power, sm, v["gpu_sm_clock_mhz"], node_temp, node_power, growth],
                     axis=-1)
    assert stack.shape[-1] == len(INPUTS)
    out = []
    for start in range(0, temp.shape[1] - WINDOW_MIN + 1, WINDOW_MIN):
        block = stack[:, start:start + WINDOW_MIN]
        whole = ~np.isnan(block[:, :, 0]).any(axis=1)
        if whole.any():
            out.append(window_features(block[whole]))
    return np.concatenate(out) if out else np.zeros((0, 11))


def lemon_scores(store: Store, start_ts: float, end_ts: float, half_life_d: float
                 ) -> dict[tuple[str, str], tuple[float, float]]:
    """Each node's decayed trouble at ``end_ts`` from the store's XID and GPU-state events."""
    events = getattr(store, "events", None)
    if events is None:
        return {}
    half = half_life_d * 86400.0
    scores: dict[tuple[str, str], float] = {}
    fell: dict[tuple[str, str, str], float] = {}  # GPU -> its last XID 79 (lost_points)
    for e in sorted(events(start_ts, end_ts, kinds=["xid", "gpu_state"]), key=lambda e: e.ts):
        gpu = (e.cluster, e.node, e.device)
        if e.kind == "xid":
            points = DEFAULT_XID_POINTS.get(e.code, 1.0)
            if e.code == 79:
                fell[gpu] = e.ts
        else:
            points = lost_points(fell.get(gpu), e.ts) if e.value == "lost" else 0.0
        key = (e.cluster, e.node)
        scores[key] = scores.get(key, 0.0) + points * 0.5 ** ((end_ts - e.ts) / half)
    return {k: (v, end_ts) for k, v in scores.items() if v > 0.01}


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


class Fit:
    """What training keeps of each ``Day``, then the fit: one object, two sources."""

    def __init__(self, progress: Callable[[str], None] | None = None) -> None:
        self.say = progress or (lambda text: None)
        # Per day: X, temperatures, each row's GPU (its row in the day), minutes, the
        # day's GPU keys (the parts of several processes are merged: evaluate.py).
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]] = []
        self.windows: list[np.ndarray] = []
        self.gpus: set[tuple[str, str, int]] = set()
        self.started = time.perf_counter()

    def add(self, day: Day) -> None:
        self.gpus.update((c, n, g) for c, _, n, g in day.gpus)
        self.parts.append((*_thermal_rows(day, every=2), _gpu_keys(day)))
        self.windows.append(anomaly_windows(day))
        end = int(day.minutes[-1]) // 1000 + 60 if len(day.minutes) else 0
        self.say(f"read {time.strftime('%Y-%m-%d %H:%M', time.gmtime(end))} UTC: "
                 f"{len(day.gpus)} GPUs, {sum(len(p[1]) for p in self.parts):,} samples so far")

    def write(self, start_ts: float, end_ts: float, out_dir: str | Path, seed: int = 0,
              lemon: dict[tuple[str, str], tuple[float, float]] | None = None
              ) -> tuple[Path, dict[str, Any]]:
        if not self.gpus:
            raise ValueError("the store holds no GPU samples in that range: point --store or "
                             "store.* at the fleet's history, or choose another --days/--end")
        parts = self.parts
        X = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        codes: dict[str, int] = {}  # GPU key -> its number, over all the days
        keys = np.concatenate([np.asarray([codes.setdefault(k, len(codes)) for k in p[4]]
                                          or [0], dtype=np.int32)[p[2]] for p in parts])
        order = np.concatenate([p[3] for p in parts])
        self.say(f"fitting thermal health on {len(y):,} GPU-minutes")
        thermal = fit_thermal(X, y, keys, order, seed=seed, names=list(codes))
        feats = np.concatenate(self.windows) if self.windows else np.zeros((0, 11))
        self.say(f"fitting the anomaly model on {len(feats):,} ten-minute windows")
        anomaly = fit_anomaly(feats, seed=seed) if len(feats) else None
        lemon = lemon or {}
        meta = {
            "created": time.time(), "range": [start_ts, end_ts], "gpus": len(self.gpus),
            "features": {"thermal": list(FEATURES), "anomaly": list(INPUTS)},
            "window_min": WINDOW_MIN, "thermal_regressor": thermal.kind,
            "thermal_heldout_mae_c": {k: round(v, 3) for k, v in thermal.heldout_mae_c.items()},
            "thermal_spread_c": round(thermal.spread_c, 3),
            "anomaly_phases": anomaly.windows if anomaly else {}, "lemon_nodes": len(lemon),
            "thermal_rows": len(y), "anomaly_windows": len(feats),
            "train_s": round(time.perf_counter() - self.started, 1)}
        from fleetwatch import __version__

        meta["fleetwatch"] = __version__
        path = save(ModelSet(thermal, anomaly, lemon, meta), out_dir)
        return path, meta


def train(store: Store, start_ts: float, end_ts: float, out_dir: str | Path, *,
          seed: int = 0, lemon_half_life_d: float = 7.0,
          progress: Callable[[str], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """Fit every learned model on [start, end) of ``store`` and write a model file."""
    fit = Fit(progress)
    chunk = start_ts
    while chunk < end_ts:
        stop = min(end_ts, chunk + CHUNK_S)
        fit.add(read_day(store, int(chunk * 1000), int(stop * 1000)))
        chunk = stop
    return fit.write(start_ts, end_ts, out_dir, seed,
                     lemon_scores(store, start_ts, end_ts, lemon_half_life_d))


def train_frames(history: FrameDays, start_ts: float, end_ts: float, out_dir: str | Path, *,
                 seed: int = 0, progress: Callable[[str], None] | None = None
                 ) -> tuple[Path, dict[str, Any]]:
    """Fit every learned model on frames held in memory (``FrameDays``): the same features
    as ``train`` reads from a store written those frames. No events: no lemon history."""
    fit = Fit(progress)
    for day in history.days():
        fit.add(day)
    return fit.write(start_ts, end_ts, out_dir, seed)
