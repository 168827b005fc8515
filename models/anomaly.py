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

The model knows the fleet's history, not what the fleet does now: a job whose
phase of work the history never held (a new kernel mix, an all-reduce-heavy
phase) moves every GPU of the job the same way at the same minute. So a window
past the threshold is also compared with its job peers on the node (the other
GPUs of its node with the same job and model, whose windows closed at the same sample):
its features minus the median of theirs, in the phase's spreads. Unless that too
is past the threshold, the window is the job's, not the GPU's, and is not
anomalous. A node-wide fault that moves all its GPUs alike is therefore not this
detector's (the node and rack rules see it); a GPU with no such peer is judged
against the history alone, and its message says so.

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
from fleetwatch.models.anomaly_features import (
    FEATURE_UNITS,
    FEATURES,
    INPUTS,
    PHASE_NAMES,
    PHASES,
    WINDOW_MIN,
    phase_of,
    steady,
    window_features,
)
from fleetwatch.models.batch import COL, columns
from fleetwatch.models.gpu_state import GpuState, arrival, row_median

NAN = math.nan
# Fewer steady training windows than this in a phase: too little history of it to say
# what is normal, and no model for it (its windows are not scored).
MIN_WINDOWS = 50
# A GPU is scored once per window: its finding holds for two windows (and a minute of
# slack), so that its alert neither resolves in the ten minutes until the next window
# nor across a window that spans a change of phase (scored as nothing); it resolves
# once the windows stop scoring anomalous.
HOLD_S = 2 * WINDOW_MIN * 60.0 + 60.0

_ERROR_COUNTERS = ("gpu_ecc_sbe_volatile_total", "gpu_pcie_replay_total",
                   "gpu_nvlink_crc_errors_total")
# A reading the sensor rule calls impossible (below this, or this far above the GPU's
# shutdown threshold) is no temperature: it goes into no minute, and the window
# that it breaks starts again after it, as training takes only whole windows.
_SENSOR = DetectorsConfig()


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

    def missing(self) -> list[str]:
        """The phases of work with no model (too little history of them), in order."""
        return [name for p, name in enumerate(PHASE_NAMES) if p not in self.center]


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
        if len(rows) < MIN_WINDOWS:
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


# Per GPU: its open minute (which minute, how many samples, the sums of temperature,
# power, SM activity and clock, each error counter's first and last reading in it) and
# the closed minutes of its open window (``rows``, ``filled`` of them).
_FIELDS: dict[str, float | bool] = {
    "open": False, "minute": NAN, "n": 0.0, "temp": 0.0, "power": 0.0, "sm": 0.0,
    "clock": 0.0, "err_first": NAN, "err_last": NAN, "filled": 0.0, "rows": NAN,
    "next": NAN}  # the minute the open window goes on with: ten minutes in a row
_SUMS = ("temp", "power", "sm", "clock")
_T, _P, _SM, _UTIL, _CLK, _SHUT, _E0, _E1, _E2 = (COL[n] for n in (
    "gpu_temp_c", "gpu_power_w", "gpu_sm_active_ratio", "gpu_util_pct", "gpu_sm_clock_mhz",
    "gpu_shutdown_temp_c", *_ERROR_COUNTERS))
_N_ERR = len(_ERROR_COUNTERS)
_Window = tuple[Frame, tuple[str, str, int], np.ndarray]


class FleetAnomaly:
    """Scores ten-minute windows of every GPU against the fleet's trained phases."""

    name = "fleet_anomaly"
    rules: Mapping[str, tuple[str, ...]] = {"fleet_anomaly": ("gpu_temp_c", "gpu_power_w")}

    def __init__(self, model: AnomalyModel | None = None, consecutive: int = 2) -> None:
        self.model = model
        self.consecutive = consecutive
        self._gpus = GpuState(_FIELDS, {"rows": (WINDOW_MIN, len(INPUTS)),
                                        "err_first": (_N_ERR,), "err_last": (_N_ERR,)})
        self._streak: dict[tuple[str, str, int], int] = {}

    def drop(self, nodes: Sequence[str]) -> None:
        self._gpus.drop(nodes)
        gone = set(nodes)
        for key in [k for k in self._streak if k[1] in gone]:
            del self._streak[key]

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        """Add each GPU sample to its minute's sums, a whole batch at a time: wave by wave
        (each GPU's samples in the order handed over), all GPUs of a wave at once."""
        if self.model is None or not frames:
            return []
        b = columns(frames)
        order = arrival(frames, b)
        x = b.x[order.rows]
        slots = self._gpus.slots(b)[order.rows]
        for key in self._gpus.replaced:  # another board: its streak is not the old one's
            self._streak.pop(key, None)
        temp = x[:, :, _T]
        shutdown = np.where(np.isnan(x[:, :, _SHUT]), _SENSOR.fallback_shutdown_c,
                            x[:, :, _SHUT])
        valid = (b.present & ~b.lost)[order.rows] & (temp >= _SENSOR.sensor_min_c) \
            & (temp <= shutdown + _SENSOR.sensor_over_shutdown_c)  # NaN fails both
        sm = x[:, :, _SM]  # ``sm_activity``: SM_ACTIVE where reported, else utilization / 100
        inputs = {"temp": x[:, :, _T], "power": x[:, :, _P],
                  "sm": np.where(np.isnan(sm), x[:, :, _UTIL] / 100.0, sm),
                  "clock": x[:, :, _CLK]}
        errors = x[:, :, [_E0, _E1, _E2]]  # NaN: not read this tick, which is no drop
        minutes = np.floor_divide(b.ts[order.rows], 60.0)
        full: list[tuple[int, int, np.ndarray]] = []
        for wave in order.waves:
            wi, gj = np.nonzero(valid[wave])
            if len(wi):
                i = wave[wi]
                self._add(i, gj, slots[i, gj], minutes[i],
                          {k: v[i, gj] for k, v in inputs.items()}, errors[i, gj], full)
        if not full:
            return []
        full.sort(key=lambda w: (w[0], w[1]))  # as handed over, as the windows closed
        windows = []
        for i, j, rows in full:
            f = frames[i]
            windows.append((f, (f.cluster, f.node, f.gpus[j].index), rows))
        return self._score_windows(windows)

    def _add(self, i: np.ndarray, gj: np.ndarray, s: np.ndarray, minute: np.ndarray,
             values: dict[str, np.ndarray], errors: np.ndarray,
             full: list[tuple[int, int, np.ndarray]]) -> None:
        """One sample of each GPU in slots ``s`` (each once): a GPU whose minute changed
        closes it first; then the sample joins the GPU's (new) minute."""
        g = self._gpus
        closing = g["open"][s] & (g["minute"][s] != minute)
        if closing.any():
            self._close(i[closing], gj[closing], s[closing], full)
        new = ~g["open"][s] | closing
        ns = s[new]
        g["open"][ns], g["minute"][ns], g["n"][ns] = True, minute[new], 0.0
        for k in _SUMS:
            g[k][ns] = 0.0
        g["err_first"][ns] = errors[new]
        g["n"][s] += 1.0
        for k in _SUMS:
            g[k][s] += values[k]
        # Each counter from its first reading in the minute to its last: a reading NVML did
        # not give this tick neither moves nor restarts it.
        first, last = g["err_first"][s], g["err_last"][s]
        g["err_first"][s] = np.where(np.isnan(first), errors, first)
        g["err_last"][s] = np.where(np.isnan(errors), np.where(new[:, None], np.nan, last),
                                    errors)

    def _close(self, i: np.ndarray, gj: np.ndarray, s: np.ndarray,
               full: list[tuple[int, int, np.ndarray]]) -> None:
        """Close the minutes of GPUs ``s`` (frames ``i``, positions ``gj``, one frame per
        node): their means, and the median temperature and power of the GPUs of each
        frame that closed one, join the GPUs' windows; a whole window goes to ``full``."""
        g = self._gpus
        n = g["n"][s]
        # A counter that went back (a driver reload) grew by nothing; one never read, by 0.
        growth = np.nansum(np.clip(g["err_last"][s] - g["err_first"][s], 0, None), axis=1)
        means = [g[k][s] / n for k in _SUMS]
        # Per frame: the closed minutes' median temperature (NaN if any is NaN) and power
        # (over those that have one, NaN if none).
        frame, at = np.unique(i, return_inverse=True)
        at = at.reshape(-1)
        width = int(gj.max()) + 1
        t_block = np.full((len(frame), width), NAN)
        p_block = np.full((len(frame), width), NAN)
        t_block[at, gj], p_block[at, gj] = means[0], means[1]
        closed = np.zeros((len(frame), width), bool)
        closed[at, gj] = True
        node_temp, _ = row_median(t_block, closed)
        node_temp[(closed & np.isnan(t_block)).any(axis=1)] = NAN
        node_power, _ = row_median(p_block, closed & ~np.isnan(p_block))
        row = np.stack([*means, node_temp[at], node_power[at],
                        np.where(growth > 0.0, growth, 0.0)], axis=1)
        filled = g["filled"][s].astype(np.int64)
        minute = g["minute"][s]
        filled[g["next"][s] != minute] = 0  # a minute is missing: the window starts again
        g["next"][s] = minute + 1
        g["rows"][s, filled] = row
        filled += 1
        done = filled >= WINDOW_MIN
        g["filled"][s] = np.where(done, 0, filled)
        for k in np.flatnonzero(done).tolist():
            full.append((int(i[k]), int(gj[k]), g["rows"][s[k]].copy()))

    def _top(self, phase: int, features: np.ndarray) -> dict[str, float]:
        """The three features furthest from the fleet's history, as robust z-scores."""
        assert self.model is not None
        z = self.model.zscores(phase, features)
        if z is None:
            return {}
        order = np.argsort(-np.abs(z))[:3]
        return {f"z_{FEATURES[i]}": round(float(z[i]), 1) for i in order}

    def _peers(self, full: list[_Window], feats: np.ndarray, ok: np.ndarray
               ) -> list[np.ndarray | None]:
        """Per window: the median features of its job peers' windows closed at the same
        sample (same frame, same job, same model: watts and degrees differ by part;
        steady, complete), None with no such peer."""
        groups: dict[tuple[int, str | None, str], list[int]] = {}
        for k, (f, key, _) in enumerate(full):
            if ok[k]:
                gpu = next((g for g in f.gpus if g.index == key[2]), None)
                groups.setdefault((id(f), gpu and gpu.job, gpu.model if gpu else ""),
                                  []).append(k)
        out: list[np.ndarray | None] = [None] * len(full)
        for members in groups.values():
            for k in members:
                others = [m for m in members if m != k]
                if others:
                    out[k] = np.median(feats[others], axis=0)
        return out

    def _score_windows(self, full: list[_Window]) -> list[Finding]:
        """Score every window that closed in this batch at once (one array operation for
        all GPUs: the per-window cost is what the processor pays per GPU)."""
        assert self.model is not None
        model = self.model
        feats = window_features(np.asarray([rows for _, _, rows in full], dtype=float))
        ok = steady(feats) & ~np.isnan(feats).any(axis=1)
        peers = self._peers(full, feats, ok)
        out: list[Finding] = []
        sm_col = FEATURES.index("sm_mean")
        for (f, key, _), features, good, peer in zip(full, feats, ok, peers):
            if not good:
                continue  # a change of phase: not comparable, neither good nor bad
            phase = phase_of(features[sm_col])
            score = model.score(phase, features)
            limit = model.thresholds.get(phase, math.inf)
            peer_score = (None if peer is None or score is None else
                          float(np.abs((features - peer) / model.scale[phase]).max()))
            if score is None or score <= limit or (peer_score is not None
                                                   and peer_score <= limit):
                self._streak[key] = 0  # like the history, or moving with its job peers
                continue
            streak = self._streak[key] = self._streak.get(key, 0) + 1
            if streak < self.consecutive:
                continue
            out.append(self._finding(f, key[2], phase, features, peer, score, peer_score,
                                     streak))
        return out

    def _finding(self, f: Frame, gpu: int, phase: int, features: np.ndarray,
                 peer: np.ndarray | None, score: float, peer_score: float | None,
                 streak: int) -> Finding:
        """The finding, with the furthest feature in its own unit: the GPU's value, the
        phase's centre and spread in the training history, and its job peers' now."""
        assert self.model is not None
        model = self.model
        k = int(np.argmax(np.abs(model.zscores(phase, features))))  # type: ignore[arg-type]
        name = FEATURES[k]
        label, unit, suffix, fmt = FEATURE_UNITS[name]
        value, centre = float(features[k]), float(model.center[phase][k])
        spread, limit = float(model.scale[phase][k]), model.thresholds[phase]
        edges = (0.0, *PHASES, 1.0)
        where = (f"the {PHASE_NAMES[phase]} phase (SM activity {edges[phase]:.0%}-"
                 f"{edges[phase + 1]:.0%})")
        now = ("no job peer on its node to compare with now" if peer is None else
               f"its job peers on the node now: {peer[k]:{fmt}}{unit}")
        ev = {"score": round(score, 2), "threshold": round(limit, 2), "phase": phase,
              f"{name}_{suffix}": round(value, 3),
              f"normal_{name}_{suffix}": round(centre, 3),
              f"spread_{name}_{suffix}": round(spread, 3)}
        if peer is not None and peer_score is not None:
            ev[f"peers_{name}_{suffix}"] = round(float(peer[k]), 3)
            ev["peer_score"] = round(peer_score, 2)
        return Finding(
            self.name, f.cluster, f.rack, f.node, gpu, f.ts, round(score, 3),
            f"GPU {gpu} on {f.node}: {label} {value:{fmt}}{unit} for {streak * WINDOW_MIN} "
            f"min, against {centre:{fmt}}{unit} (spread {spread:{fmt}}{unit}) in the fleet's "
            f"training history of {where}; {now} (score {score:.1f} spreads, alert above "
            f"{limit:.1f})", "warning", 0.0, HOLD_S,
            evidence={**ev, **self._top(phase, features)},
            action="Compare it with its node's peers on the node page; look for a "
                   "failing part the rules do not name yet.")
