"""The fleet anomaly model: GPUs that behave unlike the fleet, in the same phase of work.

Per GPU, ten-minute windows of one-minute means give a feature vector: the
levels and spreads of temperature, power, SM activity and clock, the
temperature's slope, the GPU's temperature and power against its node's
median, and the growth of its error counters. The model holds, per *phase*
of work (idle, light, medium, heavy by SM activity), each feature's robust
centre and spread over the fleet's history; a window's score is its largest
robust z. A GPU that moves from compute to an all-reduce wait is compared
with other windows of that phase, and a window that spans a change of phase is
compared with nothing, so job load swings never page. A score past the
phase's threshold (well beyond what the fleet's own history reached) in
``consecutive`` windows in a row makes a finding; ``fit_anomaly`` says why this
model and not an IsolationForest.

The detector feeds one-minute means, as the training reads the store's
one-minute rollups: the features mean the same thing in both places.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import Finding

WINDOW_MIN = 10
# The per-minute inputs, in this order (NaN when a GPU does not report one).
INPUTS: tuple[str, ...] = ("temp", "power", "sm", "clock", "node_temp", "node_power", "errors")
FEATURES: tuple[str, ...] = (
    "temp_mean", "temp_std", "temp_slope", "power_mean", "power_std", "sm_mean", "sm_std",
    "clock_mean", "temp_vs_node", "power_vs_node", "errors_log")
PHASES: tuple[float, ...] = (0.05, 0.3, 0.6)  # SM activity edges: idle | light | medium | heavy
# A window whose SM activity swings more than this spans two phases of work (a job
# starting, a checkpoint): it is compared with nothing, in training or in service.
MAX_PHASE_SWING = 0.1
# A GPU is scored once per window: its finding holds for two windows (and a minute of
# slack), so that its alert neither resolves in the ten minutes until the next window
# nor across a window that spans a change of phase (scored as nothing); it resolves
# once the windows stop scoring anomalous.
HOLD_S = 2 * WINDOW_MIN * 60.0 + 60.0


def steady(features: np.ndarray) -> np.ndarray:
    """Which rows (windows) stay within one phase of work."""
    return features[:, FEATURES.index("sm_std")] <= MAX_PHASE_SWING
_ERROR_COUNTERS = ("gpu_ecc_sbe_volatile_total", "gpu_pcie_replay_total",
                   "gpu_nvlink_crc_errors_total")
_E0, _E1, _E2 = _ERROR_COUNTERS
# A reading the sensor rule calls impossible (below this, or this far above the GPU's
# shutdown threshold) is no temperature: it goes into no minute, and the window
# that it breaks starts again after it, as training takes only whole windows.
_SENSOR = DetectorsConfig()


def phase_of(sm_mean: float) -> int:
    if sm_mean != sm_mean:
        return 0
    return int(np.searchsorted(PHASES, sm_mean, side="right"))


def window_features(minutes: np.ndarray) -> np.ndarray:
    """Features of windows: ``minutes`` is (windows, WINDOW_MIN, len(INPUTS)) of minute means
    (or one window, (WINDOW_MIN, len(INPUTS))); returns (windows, len(FEATURES))."""
    block = minutes[None] if minutes.ndim == 2 else minutes
    t, p, sm, clk, nt, npw, err = np.moveaxis(block, -1, 0)
    # Least-squares slope of temperature per minute, over the minutes that have one.
    x = np.broadcast_to(np.arange(t.shape[1], dtype=float), t.shape)
    ok = ~np.isnan(t)
    with np.errstate(all="ignore"):
        n = ok.sum(axis=1)
        xm = np.where(ok, x, 0).sum(axis=1) / n
        tm = np.where(ok, t, 0).sum(axis=1) / n
        dx = np.where(ok, x - xm[:, None], 0)
        dt = np.where(ok, t - tm[:, None], 0)
        slope = np.where(n >= 3, (dx * dt).sum(axis=1) / (dx * dx).sum(axis=1), np.nan)
        return np.stack([
            np.nanmean(t, axis=1), np.nanstd(t, axis=1), slope, np.nanmean(p, axis=1),
            np.nanstd(p, axis=1), np.nanmean(sm, axis=1), np.nanstd(sm, axis=1),
            np.nanmean(clk, axis=1), np.nanmean(t - nt, axis=1), np.nanmean(p - npw, axis=1),
            np.log1p(np.clip(np.nansum(err, axis=1), 0, None))], axis=1)


# Each feature's smallest meaningful spread (its unit's noise), so that a feature
# that never moved in training (an error counter, a locked clock) does not turn
# the first tiny change into an infinite score.
_FLOORS = np.array([2.0, 0.5, 0.1, 10.0, 5.0, 0.05, 0.03, 50.0, 2.0, 15.0, 0.5])


@dataclass
class AnomalyModel:
    """Per phase of work: each feature's robust centre and spread over the fleet's
    history, and the score (largest robust z over the features) above which a
    window is unlike anything the fleet did in that phase."""

    center: dict[int, np.ndarray]
    scale: dict[int, np.ndarray]
    thresholds: dict[int, float]
    windows: dict[int, int] = field(default_factory=dict)

    def zscores(self, phase: int, features: np.ndarray) -> np.ndarray | None:
        if phase not in self.center or np.isnan(features).any():
            return None
        return (features - self.center[phase]) / self.scale[phase]

    def score(self, phase: int, features: np.ndarray) -> float | None:
        z = self.zscores(phase, features)
        return None if z is None else float(np.abs(z).max())


def fit_anomaly(features: np.ndarray, seed: int = 0, quantile: float = 0.999,
                factor: float = 1.5, floor_score: float = 8.0) -> AnomalyModel:
    """Robust centres and spreads per phase over training windows (rows of FEATURES).

    Why not an IsolationForest: measured on a simulated fleet, a GPU reading
    30 °C above its node's peers scored no lower than the most unusual healthy
    training window. The forest picks a random feature at each split, so one
    strongly deviating feature among eleven isolates no faster than the many
    mildly unusual windows of a busy fleet, and its scores saturate at the
    trees' depth. A per-feature robust z (median, 1.4826 x MAD) keeps a strong
    single deviation strong, says which feature it is, and costs a subtraction.
    The threshold: ``factor`` times the ``quantile`` of the training windows'
    own scores, and never below ``floor_score``.
    """
    del seed  # deterministic: no randomness left to seed
    features = features[~np.isnan(features).any(axis=1)]
    features = features[steady(features)]
    sm = features[:, FEATURES.index("sm_mean")]  # phase_of, for every row at once
    phases = np.where(np.isnan(sm), 0, np.searchsorted(PHASES, sm, side="right"))
    center: dict[int, np.ndarray] = {}
    scale: dict[int, np.ndarray] = {}
    thresholds: dict[int, float] = {}
    counts: dict[int, int] = {}
    for phase in np.unique(phases):
        rows = features[phases == phase]
        if len(rows) < 50:
            continue  # too little history of this phase to say what is normal
        med = np.median(rows, axis=0)
        mad = 1.4826 * np.median(np.abs(rows - med), axis=0)
        sc = np.maximum(mad, _FLOORS)
        scores = np.abs((rows - med) / sc).max(axis=1)
        p = int(phase)
        center[p], scale[p] = med, sc
        thresholds[p] = max(floor_score, factor * float(np.quantile(scores, quantile)))
        counts[p] = len(rows)
    return AnomalyModel(center, scale, thresholds, counts)


def _median(values: list[float]) -> float:
    """``float(np.median(values))`` for a node's few GPUs, without numpy's per-call cost:
    NaN if any is NaN (or none is given), else the middle value or the mean of the two."""
    n = len(values)
    if not n or any(v != v for v in values):
        return math.nan
    ordered = sorted(values)
    mid = n // 2
    # numpy's mean of the middle one or two: a sum from 0.0 (so -0.0 comes out 0.0), halved.
    return 0.0 + ordered[mid] if n % 2 else (0.0 + ordered[mid - 1] + ordered[mid]) / 2.0


class _Minute:
    __slots__ = ("minute", "n", "sums", "err_first", "err_last")

    def __init__(self, minute: int) -> None:
        self.minute, self.n = minute, 0
        self.sums = [0.0, 0.0, 0.0, 0.0]
        self.err_first: float | None = None
        self.err_last: float | None = None


class FleetAnomaly:
    """Scores ten-minute windows of every GPU against the fleet's trained phases."""

    name = "fleet_anomaly"
    rules: Mapping[str, tuple[str, ...]] = {"fleet_anomaly": ("gpu_temp_c", "gpu_power_w")}

    def __init__(self, model: AnomalyModel | None = None, consecutive: int = 2) -> None:
        self.model = model
        self.consecutive = consecutive
        self._minute: dict[tuple[str, str, int], _Minute] = {}
        self._rows: dict[tuple[str, str, int], list[list[float]]] = {}
        self._next: dict[tuple[str, str, int], int] = {}  # the minute a window goes on with
        self._streak: dict[tuple[str, str, int], int] = {}

    def drop(self, nodes: Sequence[str]) -> None:
        gone = set(nodes)
        for d in (self._minute, self._rows, self._next, self._streak):
            for key in [k for k in d if k[1] in gone]:
                del d[key]

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        if self.model is None:
            return []
        full: list[tuple[Frame, tuple[str, str, int], list[list[float]]]] = []
        for f in frames:
            minute = int(f.ts // 60)
            closed: list[tuple[tuple[str, str, int], list[float]]] = []
            for g in f.gpus:
                m = g.metrics
                get = m.get
                temp = get("gpu_temp_c")
                if temp is None or g.state != "ok" or not _SENSOR.sensor_min_c <= temp <= get(
                        "gpu_shutdown_temp_c", _SENSOR.fallback_shutdown_c) \
                        + _SENSOR.sensor_over_shutdown_c:
                    continue
                key = (f.cluster, f.node, g.index)
                acc = self._minute.get(key)
                if acc is not None and acc.minute != minute:
                    closed.append((key, self._close(acc)))
                    acc = None
                if acc is None:
                    acc = self._minute[key] = _Minute(minute)
                acc.n += 1
                s = acc.sums
                s[0] += temp
                s[1] += get("gpu_power_w", math.nan)
                sm = get("gpu_sm_active_ratio")  # sm_activity(m), inline: once per GPU sample
                if sm is None:
                    util = get("gpu_util_pct")
                    sm = math.nan if util is None else util / 100.0
                s[2] += sm
                s[3] += get("gpu_sm_clock_mhz", math.nan)
                errors = sum((get(_E0, 0.0), get(_E1, 0.0), get(_E2, 0.0)))
                if acc.err_first is None:
                    acc.err_first = errors
                acc.err_last = errors
            if closed:
                self._minutes_closed(f, closed, full)
        return self._score_windows(full) if full else []

    def _top(self, phase: int, features: np.ndarray) -> dict[str, float]:
        """The three features furthest from the fleet, as robust z-scores."""
        assert self.model is not None
        z = self.model.zscores(phase, features)
        if z is None:
            return {}
        order = np.argsort(-np.abs(z))[:3]
        return {f"z_{FEATURES[i]}": round(float(z[i]), 1) for i in order}

    @staticmethod
    def _close(acc: _Minute) -> list[float]:
        n = acc.n
        growth = (acc.err_last or 0.0) - (acc.err_first or 0.0)
        return [acc.sums[0] / n, acc.sums[1] / n, acc.sums[2] / n, acc.sums[3] / n,
                max(0.0, growth), acc.minute]

    def _minutes_closed(self, f: Frame, closed: list[tuple[tuple[str, str, int], list[float]]],
                        full: list[tuple[Frame, tuple[str, str, int], list[list[float]]]]
                        ) -> None:
        """Append each GPU's closed minute to its window; a whole window goes to ``full``."""
        node_temp = _median([v[0] for _, v in closed])
        node_power = _median([v[1] for _, v in closed if v[1] == v[1]]) if closed else math.nan
        for key, (t, p, sm, clk, err, minute) in closed:
            rows = self._rows.setdefault(key, [])
            if rows and self._next.get(key) != minute:
                rows.clear()  # a minute is missing: a window is ten minutes in a row
            self._next[key] = minute + 1
            rows.append([t, p, sm, clk, node_temp, node_power, err])
            if len(rows) >= WINDOW_MIN:
                full.append((f, key, rows))
                self._rows[key] = []

    def _score_windows(self, full: list[tuple[Frame, tuple[str, str, int], list[list[float]]]]
                       ) -> list[Finding]:
        """Score every window that closed in this batch at once (one array operation for
        all GPUs: the per-window cost is what the processor pays per GPU)."""
        assert self.model is not None
        model = self.model
        feats = window_features(np.asarray([rows for _, _, rows in full], dtype=float))
        ok = steady(feats)
        out: list[Finding] = []
        sm_col = FEATURES.index("sm_mean")
        for (f, key, _), features, good in zip(full, feats, ok):
            if not good:
                continue  # a change of phase: not comparable, neither good nor bad
            phase = phase_of(features[sm_col])
            score = model.score(phase, features)
            if score is None or score <= model.thresholds[phase]:
                self._streak[key] = 0
                continue
            streak = self._streak[key] = self._streak.get(key, 0) + 1
            if streak < self.consecutive:
                continue
            gpu = key[2]
            out.append(Finding(
                self.name, f.cluster, f.rack, f.node, gpu, f.ts, round(score, 3),
                f"GPU {gpu} on {f.node} behaves unlike any GPU of the fleet in the same phase "
                f"of work for {streak * WINDOW_MIN} min", "warning", 0.0, HOLD_S,
                evidence={"score": round(score, 2), **self._top(phase, features)},
                action="Compare it with its node's peers on the node page; look for a "
                       "failing part the rules do not name yet."))
        return out
