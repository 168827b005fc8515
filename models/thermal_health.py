"""Thermal health: is this GPU hotter than its load explains?

A regressor learns, from the fleet's own history, the die temperature a GPU
should have given what drives it: its power, SM activity and clocks, its fan
where reported, its enforced power limit and slowdown threshold (which tell GPU
models apart), and what its node's GPUs show of the air they breathe (the median
temperature and power of the node's GPUs, and the BMC inlet sensor where there is
one). The
residual, measured minus expected, is near zero for a healthy GPU however hard
it works. Each GPU also has its own lifelong offset (some run a few degrees
warm: a longer cold-plate loop, a worse thermal paste), learned at training
time, so what is scored is the *growth* of its residual over its own history,
in units of the fleet's residual spread: a failing fan, a drying cold plate or
dust show up as a residual that grows for hours, days before any fixed limit.

``ThermalModel`` is the trained part (fit on arrays, saved in a model file);
``ThermalHealth`` is the detector that scores frames with it in the processor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np

from fleetwatch.frame import Frame
from fleetwatch.models import Finding

# The regressor's inputs, in this order. A missing one is NaN (the gradient-
# boosted model handles NaN natively; the linear one imputes the median).
FEATURES: tuple[str, ...] = ("power_w", "sm_active", "sm_clock_mhz", "fan_pct", "node_temp_c",
                             "node_power_w", "inlet_c", "power_limit_w", "slowdown_c")
_GPU_INPUTS = {"power_w": "gpu_power_w", "sm_clock_mhz": "gpu_sm_clock_mhz",
               "fan_pct": "gpu_fan_pct", "power_limit_w": "gpu_power_limit_w",
               "slowdown_c": "gpu_slowdown_temp_c"}


def sm_activity(metrics: Mapping[str, float]) -> float:
    """SM activity 0..1: DCGM's SM_ACTIVE where reported, else NVML's utilization / 100."""
    v = metrics.get("gpu_sm_active_ratio")
    if v is not None:
        return v
    u = metrics.get("gpu_util_pct")
    return math.nan if u is None else u / 100.0


def node_median(values: Sequence[float]) -> float:
    """The median of a node's GPUs' readings (NaN: not reported), NaN with fewer than two.

    With the node's median power, its median temperature tells the model the air its
    GPUs breathe (die = air + R x power): a robust statistic, so that one GPU gone odd
    (a sensor reading 0, a stuck or throttled GPU running cool, one whose cooling
    fails) does not make the node's air look colder or warmer for every other GPU, as
    the mean of the two coolest GPUs did.
    """
    finite = sorted(v for v in values if v == v)
    n = len(finite)
    if n < 2:
        return math.nan
    mid = n // 2  # as numpy's nanmedian (training's): the middle one, or the mean of two
    return 0.0 + finite[mid] if n % 2 else (0.0 + finite[mid - 1] + finite[mid]) / 2.0


def frame_rows(frame: Frame) -> tuple[list[int], list[list[float]], list[float]]:
    """(GPU indices, feature rows, die temperatures) of one frame's GPUs that report one."""
    live = [g for g in frame.gpus if g.state == "ok"]
    node_temp = node_median([g.metrics.get("gpu_temp_c", math.nan) for g in live])
    node_power = node_median([g.metrics.get("gpu_power_w", math.nan) for g in live])
    inlet = frame.host.metrics.get("host_inlet_temp_c", math.nan)
    idx: list[int] = []
    rows: list[list[float]] = []
    ys: list[float] = []
    for g in live:
        m = g.metrics
        temp = m.get("gpu_temp_c", math.nan)
        if temp != temp:
            continue
        row = [m.get(_GPU_INPUTS["power_w"], math.nan), sm_activity(m),
               m.get(_GPU_INPUTS["sm_clock_mhz"], math.nan), m.get("gpu_fan_pct", math.nan),
               node_temp, node_power, inlet, m.get("gpu_power_limit_w", math.nan),
               m.get("gpu_slowdown_temp_c", math.nan)]
        idx.append(g.index)
        rows.append(row)
        ys.append(temp)
    return idx, rows, ys


def _candidates(seed: int) -> dict[str, object]:
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import HuberRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # Huber: a robust linear fit, for fleets whose temperature is close to linear in
    # power over the intake (it is, to first order: T = T_in + R_th * P). Gradient
    # boosting: for the curvature real GPUs add (fan curves, clock-dependent leakage,
    # several GPU models in one fleet). The held-out error decides, per fleet.
    return {
        "huber": make_pipeline(SimpleImputer(strategy="median", keep_empty_features=True),
                               StandardScaler(), HuberRegressor(max_iter=500)),
        "gradient_boosting": HistGradientBoostingRegressor(
            max_iter=100, learning_rate=0.15, max_leaf_nodes=15, l2_regularization=1.0,
            random_state=seed),
    }


@dataclass
class ThermalModel:
    """The fitted expectation of die temperature, and the fleet's residual statistics."""

    estimator: object
    kind: str
    heldout_mae_c: dict[str, float]
    # Per GPU (cluster/node/gpuN) lifelong residual offset, °C: its own history.
    offsets: dict[str, float] = field(default_factory=dict)
    # Robust spread (1.4826 * MAD) of a GPU's smoothed residual around its offset, °C.
    spread_c: float = 1.0
    # The FEATURES columns the fleet reported in training (a column that was never
    # reported, e.g. fans on liquid-cooled GPUs, is left out of the fit).
    used: tuple[int, ...] = tuple(range(len(FEATURES)))

    def expected(self, rows: np.ndarray) -> np.ndarray:
        x = rows[:, self.used]
        linear = _linear(self.estimator)
        if linear is not None:
            fill, w, b = linear
            return np.where(np.isnan(x), fill, x) @ w + b
        with _one_thread():
            return np.asarray(self.estimator.predict(x), dtype=float)  # type: ignore[attr-defined]


_LINEAR: dict[int, tuple[object, tuple[np.ndarray, np.ndarray, float] | None]] = {}


def _linear(estimator: object) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The Huber pipeline (median imputer, scaler, linear fit) as one fill and one dot
    product: the same numbers as its ``predict`` (to rounding), without the 3 ms that
    scikit-learn's input checks cost per call of a few hundred rows (measured), which is
    what the processor pays per batch. None for any other estimator."""
    hit = _LINEAR.get(id(estimator))
    if hit is not None and hit[0] is estimator:
        return hit[1]
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import HuberRegressor
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    out = None
    steps = [s for _, s in estimator.steps] if isinstance(estimator, Pipeline) else []
    if (len(steps) == 3 and isinstance(steps[0], SimpleImputer)
            and isinstance(steps[1], StandardScaler) and isinstance(steps[2], HuberRegressor)
            and steps[1].with_mean and steps[1].with_std):
        imp, sc, hub = steps
        scale = np.where(sc.scale_ == 0, 1.0, sc.scale_)
        w = hub.coef_ / scale
        out = (np.asarray(imp.statistics_, dtype=float), w,
               float(hub.intercept_ - np.dot(sc.mean_, w)))
    if len(_LINEAR) > 16:
        _LINEAR.clear()
    _LINEAR[id(estimator)] = (estimator, out)
    return out


_CONTROLLER: list[object] = []


def _one_thread(user_api: str | None = "openmp") -> AbstractContextManager[object]:
    """Predict on one OpenMP thread. The processor scores one batch of a few thousand rows
    at a time: starting a team of threads for each of the hundred trees cost 100x the
    arithmetic (measured: 0.2 s against 2 ms per batch of 128 GPUs on a busy 2-core box).
    The processor scales by worker processes, not by threads. The controller (which
    looks up the loaded OpenMP libraries) is built once. ``user_api=None``: BLAS too."""
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0].limit(limits=1, user_api=user_api)  # type: ignore[attr-defined, no-any-return]


def fit_thermal(X: np.ndarray, y: np.ndarray, gpu_ids: np.ndarray, order: np.ndarray,
                seed: int = 0, max_rows: int = 200_000, names: Sequence[str] | None = None
                ) -> ThermalModel:
    """Fit on rows ``X`` (FEATURES), die temperatures ``y``, each row's GPU id and time.
    ``gpu_ids``: each row's GPU key, or with ``names`` its index in ``names``.

    The last fifth of the time range is held out; both candidates are scored on
    it and the better one is refitted on everything. Offsets and spread come from
    the residuals of that final model.
    """
    if len(y) < 200:
        raise ValueError(f"only {len(y)} samples with temperature and power: train on a "
                         "longer range (at least a few hours of a fleet)")
    rng = np.random.default_rng(seed)
    used = tuple(i for i in range(X.shape[1]) if not np.isnan(X[:, i]).all())
    full, X = X, X[:, used]
    cut = np.quantile(order, 0.8)
    train, test = np.flatnonzero(order < cut), np.flatnonzero(order >= cut)
    if len(train) > max_rows:
        train = rng.choice(train, max_rows, replace=False)
    if len(test) > max_rows // 4:
        test = rng.choice(test, max_rows // 4, replace=False)
    scores: dict[str, float] = {}
    # One thread for the fits too (OpenMP and BLAS): a fit of max_rows is a second or two
    # of arithmetic, and a team of two threads on a shared 2-core box spins at each tree's
    # barriers (measured there, gradient boosting on 200,000 rows: 6 s wall, 1.4 s CPU
    # on one thread; 62 s wall, 19 s CPU on two).
    with _one_thread(None):
        for name, est in _candidates(seed).items():
            est.fit(X[train], y[train])  # type: ignore[attr-defined]
            scores[name] = float(np.mean(np.abs(est.predict(X[test]) - y[test])))  # type: ignore[attr-defined]
        best = min(scores, key=scores.__getitem__)
        estimator = _candidates(seed)[best]
        every = np.arange(len(y))
        if len(every) > max_rows:
            every = rng.choice(every, max_rows, replace=False)
        estimator.fit(X[every], y[every])  # type: ignore[attr-defined]
    model = ThermalModel(estimator, best, scores, used=used)
    residual = y - model.expected(full)
    offsets: dict[str, float] = {}
    deviations: list[np.ndarray] = []
    # Each GPU's rows in time order, all GPUs at once (one sort, not a scan per GPU).
    ids, which = np.unique(gpu_ids, return_inverse=True)
    by = np.lexsort((order, which))
    for gid, mine in zip(ids.tolist(), np.split(by, np.flatnonzero(np.diff(which[by])) + 1)):
        r = residual[mine]
        offset = float(np.median(r))
        offsets[str(gid) if names is None else names[gid]] = offset
        k = min(len(r), 20)  # a rolling mean over ~20 samples, as the detector smooths
        if k >= 2:
            smooth = np.convolve(r - offset, np.ones(k) / k, mode="valid")
            deviations.append(smooth)
    dev = np.concatenate(deviations) if deviations else np.zeros(1)
    model.offsets = offsets
    model.spread_c = max(0.25, float(1.4826 * np.median(np.abs(dev - np.median(dev)))))
    return model


SCORE_METRIC = "gpu_thermal_health_score"
# One GPU of a frame, scored: (frame, GPU index, (ewma residual, offset, excess, score,
# warm) or None before its first smoothing step).
_Scored = tuple[Frame, int, tuple[float, float, float, float, bool] | None]


def gpu_key(cluster: str, node: str, gpu: int) -> str:
    return f"{cluster}/{node}/gpu{gpu}"


class ThermalHealth:
    """Scores each GPU's residual growth; a finding when it stays high.

    Per GPU: an exponentially weighted mean of the residual (half-life
    ``half_life_s`` of stream time: load swings and thermal lag average out)
    minus the GPU's own offset, divided by the fleet's spread: the score. It
    fires when the growth is at least ``min_excess_c`` °C and ``min_score``
    spreads, for ``for_s``. A GPU the model has never seen gets the median
    offset of its node's other GPUs as its own, until a retrain learns it.
    """

    name = "thermal_health"
    rules = {"thermal_health": ("gpu_temp_c", "gpu_power_w")}

    def __init__(self, model: ThermalModel | None = None, half_life_s: float = 900.0,
                 min_excess_c: float = 5.0, min_score: float = 4.0, for_s: float = 600.0,
                 warmup_s: float = 900.0) -> None:
        self.model = model
        self.half_life_s, self.min_excess_c = half_life_s, min_excess_c
        self.min_score, self.for_s, self.warmup_s = min_score, for_s, warmup_s
        # key -> [ewma residual, last ts, first ts]
        self._state: dict[str, list[float]] = {}
        # key -> (ts, detail) of the last scoring, so enrich and update score once
        self._detail: dict[str, tuple[float, tuple[float, float, float, float, bool] | None]] = {}
        self.scores: dict[str, float] = {}
        self._active: set[str] = set()  # GPUs flagged now (see the hysteresis in update)
        # The last batch scored and what it gave, for ``update`` after ``enrich``.
        self._last: tuple[list[Frame], list[_Scored]] = ([], [])

    def drop(self, nodes: Sequence[str]) -> None:
        gone = {f"/{n}/" for n in nodes}
        for key in [k for k in self._state if any(g in k for g in gone)]:
            del self._state[key]
            self.scores.pop(key, None)
            self._detail.pop(key, None)
            self._active.discard(key)

    def enrich(self, frames: Sequence[Frame]) -> None:
        """Score ``frames`` and add each scored GPU's ``gpu_thermal_health_score`` to its
        metrics, before the processor stores them: the score is a series like any other."""
        for f, gpu, detail in self._score(frames):
            if detail is not None:
                for g in f.gpus:
                    if g.index == gpu:
                        g.metrics[SCORE_METRIC] = round(detail[3], 3)  # type: ignore[index]

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        out: list[Finding] = []
        for f, gpu, detail in self._score(frames):
            if detail is None:
                continue
            ewma, offset, excess, score, warm = detail
            key = gpu_key(f.cluster, f.node, gpu)
            # Hysteresis: a GPU already flagged stays flagged until its excess falls under
            # half the thresholds. A degrading cold plate hovers around any threshold for
            # hours (load swings move the smoothed residual by a degree or two): without
            # it the alert would resolve and fire again, over and over.
            held = key in self._active
            need = 0.5 if held else 1.0
            if warm and excess >= need * self.min_excess_c and score >= need * self.min_score:
                self._active.add(key)
                out.append(Finding(
                    self.name, f.cluster, f.rack, f.node, gpu, f.ts, round(score, 2),
                    f"GPU {gpu} on {f.node} runs {excess:.1f} °C hotter than its load and "
                    f"air explain (thermal health score {score:.1f})", "warning", self.for_s,
                    evidence={"excess_c": round(excess, 2), "score": round(score, 2),
                              "residual_c": round(ewma, 2), "offset_c": round(offset, 2)},
                    action="Check the GPU's cooling (fan, cold plate, airflow, dust) at the "
                           "next maintenance window; it is degrading before any limit trips."))
            else:
                self._active.discard(key)
        return out

    def _score(self, frames: Sequence[Frame]
               ) -> list[tuple[Frame, int, tuple[float, float, float, float, bool] | None]]:
        """Per GPU of ``frames``: (ewma residual, offset, excess, score, warm), or None
        before its first smoothing step. Scoring the same frames again (``enrich`` then
        ``update``) returns what the first pass found, without counting them twice."""
        model = self.model
        if model is None or not frames:
            return []
        last = self._last
        if len(last[0]) == len(frames) and all(a is b for a, b in zip(last[0], frames)):
            return last[1]  # the very frames just scored (the processor's enrich, then update)
        owners: list[tuple[Frame, int, str]] = []
        rows: list[list[float]] = []
        temps: list[float] = []
        done: list[tuple[Frame, int, tuple[float, float, float, float, bool] | None]] = []
        cache = self._detail
        for f in frames:
            seen = self._seen(f)
            if seen is not None:  # scored already (``enrich`` then ``update``)
                done.extend(seen)
                continue
            idx, r, y = frame_rows(f)
            for i, row, temp in zip(idx, r, y):
                key = gpu_key(f.cluster, f.node, i)
                hit = cache.get(key)
                if hit is not None and hit[0] == f.ts:
                    done.append((f, i, hit[1]))
                    continue
                owners.append((f, i, key))
                rows.append(row)
                temps.append(temp)
        if rows:
            residual = np.asarray(temps) - model.expected(np.asarray(rows, dtype=float))
            state, offsets, spread = self._state, model.offsets, model.spread_c
            for (f, gpu, key), r in zip(owners, residual.tolist()):
                s = state.get(key)
                detail: tuple[float, float, float, float, bool] | None = None
                if s is None:
                    state[key] = [r, f.ts, f.ts]
                elif f.ts > s[1]:
                    s[0] += (1.0 - 0.5 ** ((f.ts - s[1]) / self.half_life_s)) * (r - s[0])
                    s[1] = f.ts
                    offset = offsets.get(key)
                    if offset is None:
                        offset = self._peer_offset(f, gpu)
                    excess = s[0] - offset
                    score = excess / spread
                    self.scores[key] = score
                    detail = (s[0], offset, excess, score, f.ts - s[2] >= self.warmup_s)
                if len(cache) > 200_000:
                    cache.clear()
                cache[key] = (f.ts, detail)
                done.append((f, gpu, detail))
        # Holding the frames keeps their ids from being reused by the next batch's.
        self._last = (list(frames), done)
        return done

    def _seen(self, f: Frame
              ) -> list[tuple[Frame, int, tuple[float, float, float, float, bool] | None]] | None:
        """What the last pass found for every GPU ``frame_rows`` would give of ``f``, when
        it scored them all at this frame's time; else None (the frame is scored)."""
        out = []
        cache = self._detail
        for g in f.gpus:
            temp = g.metrics.get("gpu_temp_c", math.nan)
            if temp != temp or g.state != "ok":
                continue
            hit = cache.get(gpu_key(f.cluster, f.node, g.index))
            if hit is None or hit[0] != f.ts:
                return None
            out.append((f, g.index, hit[1]))
        return out

    def _peer_offset(self, f: Frame, gpu: int) -> float:
        assert self.model is not None
        peers = [self.model.offsets[k] for g in f.gpus if g.index != gpu
                 and (k := gpu_key(f.cluster, f.node, g.index)) in self.model.offsets]
        return float(np.median(peers)) if peers else 0.0
