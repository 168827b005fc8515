"""The thermal health model: the die temperature a GPU should have, given what drives it.

A regressor learns, from the fleet's own history, the die temperature a GPU
should have given its power, SM activity and clocks, its fan where reported,
its enforced power limit and slowdown threshold (which tell GPU models apart),
and what its node's GPUs show of the air they breathe (the median temperature
and power of the node's GPUs, and the BMC inlet sensor where there is one).
``ThermalModel`` is the trained part (fit on arrays, saved in a model file);
``fleetwatch.models.thermal_health`` scores frames with it in the processor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np

# Fewer samples (every other GPU-minute with temperature and power) than this: too little
# history to fit on (``fit_thermal`` refuses; ``fleetwatch train`` says so and exits 0).
MIN_SAMPLES = 200

# The regressor's inputs, in this order. A missing one is NaN (the gradient-
# boosted model handles NaN natively; the linear one imputes the median).
FEATURES: tuple[str, ...] = ("power_w", "sm_active", "sm_clock_mhz", "fan_pct", "node_temp_c",
                             "node_power_w", "inlet_c", "power_limit_w", "slowdown_c")


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
    if len(y) < MIN_SAMPLES:
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
    errors: dict[str, float] = {}
    deviations: list[np.ndarray] = []
    # Each GPU's rows in time order, all GPUs at once (one sort, not a scan per GPU).
    ids, which = np.unique(gpu_ids, return_inverse=True)
    by = np.lexsort((order, which))
    for gid, mine in zip(ids.tolist(), np.split(by, np.flatnonzero(np.diff(which[by])) + 1)):
        r = residual[mine]
        offset = float(np.median(r))
        key = str(gid) if names is None else names[gid]
        offsets[key] = offset
        # The median's standard error: 1.25 * sigma / sqrt(n), sigma from the MAD, and n
        # counted in independent stretches (a residual wanders over ~20 samples).
        sigma = 1.4826 * float(np.median(np.abs(r - offset)))
        errors[key] = 1.2533 * sigma / np.sqrt(max(1.0, len(r) / 20))
        k = min(len(r), 20)  # a rolling mean over ~20 samples, as the detector smooths
        if k >= 2:
            smooth = np.convolve(r - offset, np.ones(k) / k, mode="valid")
            deviations.append(smooth)
    dev = np.concatenate(deviations) if deviations else np.zeros(1)
    model.offsets = shrink_offsets(offsets, errors)
    model.spread_c = max(0.25, float(1.4826 * np.median(np.abs(dev - np.median(dev)))))
    return model


def _node_of(key: str) -> str:
    return key.rsplit("/", 1)[0]


def peer_offset(offsets: Mapping[str, float], key: str) -> float:
    """What ``key``'s offset would be were it like its peers: the median offset of the
    other GPUs of its node (two or more), else of the fleet; 0 with none."""
    node = _node_of(key)
    peers = [v for k, v in offsets.items() if k != key and _node_of(k) == node]
    if len(peers) < 2:
        peers = [v for k, v in offsets.items() if k != key]
    return float(np.median(peers)) if peers else 0.0


def shrink_offsets(offsets: Mapping[str, float], errors: Mapping[str, float]
                   ) -> dict[str, float]:
    """Each GPU's offset pulled toward its peers' (``peer_offset``) by how uncertain it is
    (``errors``: its standard error, °C) against how much offsets differ from GPU to GPU
    (robust variance over the fleet): a GPU seen for an hour, or whose residual wandered
    (a fault building up), keeps less of its own; one seen steadily for days keeps it."""
    if len(offsets) < 3:
        return dict(offsets)
    values = np.asarray(list(offsets.values()))
    tau2 = max((1.4826 * float(np.median(np.abs(values - np.median(values))))) ** 2, 1e-4)
    out = {}
    for key, own in offsets.items():
        se2 = errors.get(key, 0.0) ** 2
        w = tau2 / (tau2 + se2)
        out[key] = float(w * own + (1 - w) * peer_offset(offsets, key))
    return out


def step_offsets(offsets: Mapping[str, float], previous: Mapping[str, float],
                 gpus: Sequence[str], max_step_c: float
                 ) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """The offsets a retrain keeps: each GPU's moved at most ``max_step_c`` from the
    previous model's (a slow drift cannot be learnt away in one night); a GPU of ``gpus``
    with no rows left (all of its time left out) keeps its previous offset, else its
    peers'. Returns them, and per GPU held back: (the offset learnt, the one kept)."""
    out = dict(offsets)
    held: dict[str, tuple[float, float]] = {}
    for key, new in offsets.items():
        old = previous.get(key)
        if old is not None and abs(new - old) > max_step_c:
            out[key] = old + max_step_c * float(np.sign(new - old))
            held[key] = (new, out[key])
    for key in gpus:
        if key not in out:
            out[key] = previous[key] if key in previous else peer_offset(offsets, key)
    return out, held


def gpu_key(cluster: str, node: str, gpu: int) -> str:
    return f"{cluster}/{node}/gpu{gpu}"
