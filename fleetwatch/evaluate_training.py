"""The learned models ``fleetwatch evaluate --models`` runs with, trained first on a
healthy simulated history of the evaluated fleet that precedes the evaluated day (see
``fleetwatch.evaluate``'s docstring for why, and what it cannot show).

What the frames would carry goes straight into per-minute grids
(``fleetwatch.history.FrameDays.add_samples``: the same features ``fleetwatch train``
reads from a store's minute rollups). Work is forked, never threaded: scikit-learn's
OpenMP threads started in the parent would hang the processors forked after them.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from fleetwatch.collectors.sim import FleetSim, SimParams

Progress = Callable[[str, float], None]  # (run name, fraction done)

# What a forked worker runs with, left here before the fork and read back in the child.
_FORKED: dict[str, Any] = {}


def _history(params: SimParams, start_ts: float, end_ts: float
             ) -> tuple[list[Any], list[Any], set[Any], dict[Any, Any]]:
    """Simulate [start, end) of healthy history; what training keeps of it."""
    from fleetwatch.collectors.sim.frames import gpu_samples
    from fleetwatch.history import GPU_METRICS, FrameDays
    from fleetwatch.train import Fit

    sim = FleetSim(params, start_ts)
    history = FrameDays(start_ts, end_ts)
    for _ in range(int(round((end_ts - start_ts) / params.interval_s))):
        sim.step()
        # The samples the frames would carry, as arrays: the same grids for a sixth of the
        # CPU (measured: 1.5 s against 9.3 s for 2 h of 1,000 GPUs).
        history.add_samples(sim.ts, *gpu_samples(sim, GPU_METRICS))
    fit = Fit()
    for day in history.days():
        fit.add(day)
    return fit.parts, fit.windows, fit.gpus, fit.limits


def _forked_history(part: int) -> tuple[list[Any], list[Any], set[Any], dict[Any, Any]]:
    f = _FORKED
    return _history(dataclasses.replace(f["params"], jobs_seed=1000 + part), *f["spans"][part])


def _fit(results: Sequence[tuple[list[Any], list[Any], set[Any], dict[Any, Any]]],
         start: float, end: float,
         out_dir: str, seed: int) -> dict[str, Any]:
    from fleetwatch.train import Fit

    fit = Fit()
    for thermal_parts, windows, gpus, limits in results:
        for gpu, (w, samples) in limits.items():  # the spans of one GPU: add its minutes
            fit.limits[gpu] = (w or fit.limits.get(gpu, (0, 0))[0],
                               samples + fit.limits.get(gpu, (0, 0))[1])
        fit.parts.extend(thermal_parts)
        fit.windows.extend(windows)
        fit.gpus.update(gpus)
    return fit.write(start, end, out_dir, seed)[1]


def _forked_fit() -> dict[str, Any]:
    return _fit(_FORKED["results"], *_FORKED["fit_args"])


def train_models(params: SimParams, start: float, end: float, seed: int, out_dir: str,
                 workers: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    """Train the learned models on [start, end) of healthy history of ``params``' fleet
    (``evaluate`` ends it where the evaluated runs begin); returns the model file's
    metadata. With ``workers`` >= 2 the history is simulated in two halves side by side
    (each half a separate history of the same GPUs)."""
    parts = 2 if workers >= 2 and "fork" in multiprocessing.get_all_start_methods() else 1
    cuts = [start + (end - start) * k / parts for k in range(parts + 1)]
    spans = [(cuts[k], cuts[k + 1]) for k in range(parts)]
    if progress is not None:
        progress("training history", 0.0)
    if parts == 2:
        _FORKED.update(params=params, spans=spans)
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(2, mp_context=ctx) as pool:
                results = list(pool.map(_forked_history, range(parts)))
        finally:
            _FORKED.clear()
    else:
        results = [_history(dataclasses.replace(params, jobs_seed=1000), *spans[0])]
    if parts == 2:
        # The fit runs in a forked child too: scikit-learn's OpenMP threads, once started
        # in this process, would hang the processors forked after it (libgomp and fork).
        _FORKED.update(results=results, fit_args=(start, end, out_dir, seed))
        try:
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
                meta = pool.submit(_forked_fit).result()
        finally:
            _FORKED.clear()
    else:
        meta = _fit(results, start, end, out_dir, seed)
    if progress is not None:
        progress("training history", 1.0)
    return meta
