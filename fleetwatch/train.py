"""``fleetwatch train``: fit the learned detectors on the fleet's own history.

Reads one-minute means of the metrics the models use from any store (the
embedded one or the production one, through the ``Store`` protocol), a day at
a time so memory stays bounded, fits the thermal-health regressor, the
per-phase anomaly forests and the lemon-node scores, and writes one versioned
model file (``models/artifact.py``) that running processors pick up without a
restart. Training is a command, never part of the processor's hot path.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fleetwatch.history import CHUNK_S, Day, FrameDays, read_day
from fleetwatch.models.anomaly import fit_anomaly
from fleetwatch.models.anomaly_features import INPUTS, PHASE_NAMES, WINDOW_MIN, window_features
from fleetwatch.models.artifact import ModelSet, save
from fleetwatch.models.lemon import event_order
from fleetwatch.models.lemon_points import Incidents, lost_points
from fleetwatch.models.thermal_model import (
    FEATURES,
    MIN_SAMPLES,
    fit_thermal,
    gpu_key,
    step_offsets,
)
from fleetwatch.pipeline.store.base import Store
from fleetwatch.train_exclusions import LeftOut, Span, mask, spans
from fleetwatch.train_files import previous_offsets

# How far a GPU's thermal offset may move from the previous model's in one retrain: this
# many fleet spreads, and at least MIN_STEP_C (a fleet with a tiny spread still lets a
# GPU's offset follow a real change within a few nights).
MAX_STEP_SPREADS = 2.0
MIN_STEP_C = 0.5


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
        # Each counter on its own, from one minute to the next: a minute without a reading of
        # one is no drop of the sum (and the next no rise), a counter that went back grew by 0.
        growth = np.zeros(temp.shape)
        for m in ("gpu_ecc_sbe_volatile_total", "gpu_pcie_replay_total",
                  "gpu_nvlink_crc_errors_total"):
            growth[:, 1:] += np.nan_to_num(np.clip(np.diff(v[m], axis=1), 0, None))
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
    incidents = Incidents()  # XIDs per incident, as the live score counts them
    for e in sorted(events(start_ts, end_ts, kinds=["xid", "gpu_state"]), key=event_order):
        gpu = (e.cluster, e.node, e.device)
        if e.kind == "xid":
            points = incidents.add(gpu, e.ts, e.code)
            if e.code == 79:
                fell[gpu] = e.ts
        else:
            points = lost_points(fell.get(gpu), e.ts) if e.value == "lost" else 0.0
        key = (e.cluster, e.node)
        scores[key] = scores.get(key, 0.0) + points * 0.5 ** ((end_ts - e.ts) / half)
    return {k: (v, end_ts) for k, v in scores.items() if v > 0.01}


class NotEnoughHistory(ValueError):
    """Too few GPU samples for any model (a new install): nothing is trained, and the
    nightly run is no failure (``fleetwatch train`` exits 0 saying so)."""

    def __init__(self, samples: int, minutes: np.ndarray, start_ts: float,
                 end_ts: float) -> None:
        span_h = (float(minutes.max() - minutes.min()) / 3.6e6 + 1 / 60) if len(minutes) else 0
        super().__init__(
            f"not enough history yet ({span_h:.1f} h of GPU samples in the "
            f"{(end_ts - start_ts) / 3600:.0f} h asked for: {samples} samples with "
            f"temperature and power, {MIN_SAMPLES} needed, a few hours of a fleet); nothing "
            "trained, the model file in use (if any) is kept")


class Fit:
    """What training keeps of each ``Day``, then the fit: one object, two sources."""

    def __init__(self, progress: Callable[[str], None] | None = None,
                 left: Sequence[Span] = (), previous: Mapping[str, float] | None = None
                 ) -> None:
        self.say = progress or (lambda text: None)
        # GPU-time known not to be normal (fired thermal and failing-GPU alerts, fault
        # annotations): left out of every model, and said (``train_exclusions``).
        self.left, self.left_out = list(left), LeftOut()
        # The per-GPU thermal offsets of the model in use before this one: each may move
        # at most MAX_STEP_SPREADS fleet spreads from it in one retrain.
        self.previous = dict(previous or {})
        self.read = 0  # GPU-minutes with a temperature read, before any is left out
        # Per day: X, temperatures, each row's GPU (its row in the day), minutes, the
        # day's GPU keys (the parts of several processes are merged: evaluate.py).
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]] = []
        self.windows: list[np.ndarray] = []
        self.gpus: set[tuple[str, str, int]] = set()
        # GPU -> (its power limit in W, rounded; 0: not in the data, GPU-minutes): what kind
        # of GPU the models learnt, so that a processor scores only GPUs of that kind.
        self.limits: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.started = time.perf_counter()

    def add(self, day: Day) -> None:
        self.gpus.update((c, n, g) for c, _, n, g in day.gpus)
        self._limits(day)
        self.read += int((~np.isnan(day.values["gpu_temp_c"])).sum())
        keys = _gpu_keys(day)
        out = mask(day, keys, self.left, self.left_out)
        if out.any():  # a left-out minute reads as one without a temperature
            temp = np.where(out, math.nan, day.values["gpu_temp_c"])
            day = dataclasses.replace(day, values={**day.values, "gpu_temp_c": temp})
        self.parts.append((*_thermal_rows(day, every=2), keys))
        self.windows.append(anomaly_windows(day))
        end = int(day.minutes[-1]) // 1000 + 60 if len(day.minutes) else 0
        self.say(f"read {time.strftime('%Y-%m-%d %H:%M', time.gmtime(end))} UTC: "
                 f"{len(day.gpus)} GPUs, {self.read:,} GPU-minutes so far")

    def _limits(self, day: Day) -> None:
        limit = day.values["gpu_power_limit_w"]
        seen = (~np.isnan(day.values["gpu_temp_c"])).sum(axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a GPU without the metric
            medians = np.nanmedian(limit, axis=1) if limit.size else np.zeros(0)
        for (c, _, n, g), med, k in zip(day.gpus, medians.tolist(), seen.tolist()):
            w, samples = self.limits.get((c, n, g), (0, 0))
            self.limits[(c, n, g)] = (round(med) if med == med else w, samples + int(k))

    def power_limits(self) -> dict[str, dict[str, int]]:
        """Per power limit (W, as text; "0": not in the data): its GPUs and GPU-minutes."""
        out: dict[str, dict[str, int]] = {}
        for w, samples in self.limits.values():
            kind = out.setdefault(str(w), {"gpus": 0, "samples": 0})
            kind["gpus"] += 1
            kind["samples"] += samples
        return dict(sorted(out.items()))

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
        for line in self.left_out.lines():
            self.say(f"left out (known not normal): {line}")
        self.say(f"fitting thermal health on {len(y):,} GPU-minutes (every other minute "
                 f"of the {self.read - sum(self.left_out.minutes.values()):,} kept)")
        if len(y) < MIN_SAMPLES:
            raise NotEnoughHistory(len(y), order, start_ts, end_ts)
        thermal = fit_thermal(X, y, keys, order, seed=seed, names=list(codes))
        held = self._step(thermal)
        feats = np.concatenate(self.windows) if self.windows else np.zeros((0, 11))
        self.say(f"fitting the anomaly model on {len(feats):,} ten-minute windows")
        anomaly = fit_anomaly(feats, seed=seed) if len(feats) else None
        lemon = lemon or {}
        if thermal is None and (anomaly is None or not anomaly.center):
            raise ValueError("the history gave neither a thermal model nor an anomaly model "
                             "of any phase of work: no model file written; train on a longer "
                             "span of the fleet's history (e.g. --days 7)")
        meta = {
            "created": time.time(), "range": [start_ts, end_ts], "gpus": len(self.gpus),
            # When the history read begins and ends (the range asked may hold far less).
            "data_range": [float(order.min()) / 1000, float(order.max()) / 1000 + 60]
            if len(order) else None,
            # The kinds of GPU trained on, by power limit (the store keeps no product
            # name): models/learned.py scores only GPUs whose limit is one of these.
            "gpu_power_limits_w": self.power_limits(),
            "features": {"thermal": list(FEATURES), "anomaly": list(INPUTS)},
            "window_min": WINDOW_MIN, "thermal_regressor": thermal.kind,
            "thermal_heldout_mae_c": {k: round(v, 3) for k, v in thermal.heldout_mae_c.items()},
            "thermal_spread_c": round(thermal.spread_c, 3),
            "anomaly_phases": anomaly.windows if anomaly else {},
            # Phases of work (idle, light, medium, heavy) with too little history for a
            # model: the fleet anomaly model scores no window of theirs. Train on a
            # longer range that has the fleet doing that kind of work.
            "anomaly_phases_missing": anomaly.missing() if anomaly else list(PHASE_NAMES),
            "lemon_nodes": len(lemon),
            # GPU -> hours left out as known not normal; GPU -> [offset learnt, kept].
            "left_out_h": {k: round(v / 60, 2) for k, v in self.left_out.minutes.items()},
            "offsets_held_c": {k: [round(a, 2), round(b, 2)] for k, (a, b) in held.items()},
            "thermal_rows": len(y), "anomaly_windows": len(feats),
            "train_s": round(time.perf_counter() - self.started, 1)}
        from fleetwatch import __version__

        meta["fleetwatch"] = __version__
        path = save(ModelSet(thermal, anomaly, lemon, meta), out_dir)
        return path, meta


    def _step(self, thermal: Any) -> dict[str, tuple[float, float]]:
        """Cap each GPU's offset move from the previous model's, and give a GPU whose
        every minute was left out its previous (or its peers') offset; say what was held."""
        names = [gpu_key(c, n, g) for c, n, g in sorted(self.gpus)]
        step = max(MAX_STEP_SPREADS * thermal.spread_c, MIN_STEP_C)
        thermal.offsets, held = step_offsets(thermal.offsets, self.previous, names, step)
        for key, (learnt, kept) in sorted(held.items()):
            self.say(f"offset of {key} held at {kept:+.2f} °C: it learnt {learnt:+.2f} °C, "
                     f"{learnt - self.previous[key]:+.2f} °C from the previous model's "
                     f"(at most {step:.2f} °C a retrain; a GPU drifting hot is not learnt "
                     "as its normal in one night)")
        return held


def left_spans(store: Store, start_ts: float, end_ts: float) -> list[Span]:
    """What the store knows was not normal in [start, end): fired alerts of thermal and
    failing-GPU rules, fault annotations (none where the store keeps neither)."""
    alerts = getattr(store, "alerts", None)
    notes = getattr(store, "annotations", None)
    fired = [a for a in (alerts(("pending", "firing", "resolved"), since_ts=start_ts)
                         if alerts else []) if a.started_ts < end_ts]
    return spans(fired, notes(start_ts, end_ts) if notes else [], end_ts)


def train(store: Store, start_ts: float, end_ts: float, out_dir: str | Path, *,
          seed: int = 0, lemon_half_life_d: float = 7.0,
          progress: Callable[[str], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """Fit every learned model on [start, end) of ``store`` and write a model file."""
    fit = Fit(progress, left_spans(store, start_ts, end_ts), previous_offsets(out_dir))
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
    fit = Fit(progress, previous=previous_offsets(out_dir))
    for day in history.days():
        fit.add(day)
    return fit.write(start_ts, end_ts, out_dir, seed)
