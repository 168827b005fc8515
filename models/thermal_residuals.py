"""Each GPU's residual for thermal health (``models.thermal_health``): its exponentially
weighted mean over stream time, less its lifelong offset (the trained one, else one
learned online from its first ``baseline_min`` minutes of samples), as an excess and a
score, kept per GPU slot with the detail of its last scoring. The detector decides what
is a finding and what is stored; this module only keeps the numbers.
"""

from __future__ import annotations

import math

import numpy as np

from fleetwatch.models.gpu_state import GpuState

NAN = math.nan
TRAINED, ONLINE = 1.0, 2.0  # where a GPU's offset came from

# Per GPU: the smoothed residual, its last and first time; the time and detail of its
# last scoring (``at``, ``d_*``: the same frames scored again give what they gave); its
# latest score, whether it is flagged now (the hysteresis in ``ThermalHealth.update``),
# and the time of the last score that joined a frame for the store
# (``ThermalHealth.enrich``). A GPU without a trained offset: the offset learned online
# (``own``, NaN until learned), and its baseline so far: the open minute (``b_min``, its
# residuals' sum and count), the means of the minutes closed (``b_means``) and how many.
FIELDS: dict[str, float | bool] = {
    "ewma": NAN, "last": NAN, "first": NAN, "at": NAN, "d_has": False, "d_ewma": NAN,
    "d_offset": NAN, "d_excess": NAN, "d_score": NAN, "d_warm": False, "d_source": NAN,
    "scored": False, "score": NAN, "held": False, "stored": NAN,
    "own": NAN, "b_min": NAN, "b_sum": 0.0, "b_n": 0.0, "b_means": NAN, "b_count": 0.0}


class Residuals:
    """The per-GPU state (``gpus``: ``FIELDS``, one slot per GPU) and its advance."""

    def __init__(self, half_life_s: float, warmup_s: float, baseline_min: int) -> None:
        self.half_life_s, self.warmup_s, self.baseline_min = half_life_s, warmup_s, baseline_min
        self.gpus = GpuState(FIELDS, {"b_means": (baseline_min,)})

    def advance(self, s: np.ndarray, t: np.ndarray, r: np.ndarray, trained: np.ndarray,
                spread: float) -> None:
        """One sample of GPUs in slots ``s`` (each once, none scored at that time before)
        at times ``t`` with residuals ``r`` and trained offsets (NaN: none): each advances
        its average, or starts it, and a GPU without a trained offset its baseline. A GPU
        is scored once it has an offset."""
        g = self.gpus
        last = g["last"][s]
        new = np.isnan(last)
        step = t > last  # a later sample; an older or same-time one is not scored
        learn = (new | step) & np.isnan(trained) & np.isnan(g["own"][s])
        if learn.any():
            self._baseline(s[learn], t[learn], r[learn])
        own = np.isnan(trained)
        offset = np.where(own, g["own"][s], trained)
        source = np.where(own, ONLINE, TRAINED)
        ns, nt = s[new], t[new]
        g["ewma"][ns], g["last"][ns], g["first"][ns] = r[new], nt, nt
        a, at = s[step], t[step]
        ewma = g["ewma"][a]
        ewma = ewma + self._weights(at - last[step]) * (r[step] - ewma)
        g["ewma"][a], g["last"][a] = ewma, at
        known = ~np.isnan(offset[step])
        excess = ewma - offset[step]
        score = excess / spread
        k, kt = a[known], at[known]
        g["score"][k], g["scored"][k] = score[known], True
        g["at"][s], g["d_has"][s] = t, False
        g["d_has"][k] = True
        g["d_ewma"][k], g["d_offset"][k] = ewma[known], offset[step][known]
        g["d_excess"][k], g["d_source"][k] = excess[known], source[step][known]
        g["d_score"][k], g["d_warm"][k] = score[known], kt - g["first"][k] >= self.warmup_s

    def _baseline(self, s: np.ndarray, t: np.ndarray, r: np.ndarray) -> None:
        """GPUs in slots ``s`` (each once, in time order) without an offset add a later
        sample to their baseline: a minute's residuals are averaged, as training reads
        one-minute means; the median of the first ``baseline_min`` minutes with samples
        becomes the GPU's own offset, as training takes the median of a GPU's minutes."""
        g = self.gpus
        minute = np.floor(t / 60.0)
        same = minute == g["b_min"][s]  # NaN (no open minute) is never the same
        ss = s[same]
        g["b_sum"][ss] += r[same]
        g["b_n"][ss] += 1.0
        later = s[~same]
        close = later[g["b_n"][later] > 0]
        g["b_means"][close, g["b_count"][close].astype(np.int64)] = (
            g["b_sum"][close] / g["b_n"][close])
        g["b_count"][close] += 1.0
        g["b_min"][later], g["b_sum"][later], g["b_n"][later] = minute[~same], r[~same], 1.0
        done = close[g["b_count"][close] >= self.baseline_min]
        if len(done):
            g["own"][done] = np.median(g["b_means"][done], axis=1)
            self.forget_baseline(done)

    def forget_baseline(self, s: np.ndarray) -> None:
        g = self.gpus
        g["b_min"][s], g["b_sum"][s], g["b_n"][s] = NAN, 0.0, 0.0
        g["b_means"][s], g["b_count"][s] = NAN, 0.0

    def _weights(self, dt: np.ndarray) -> np.ndarray:
        """``1 - 0.5 ** (dt / half-life)``, as Python's pow computes it, per distinct gap
        (a fleet samples at one interval: a handful of values per batch)."""
        if not len(dt):
            return dt
        gaps, which = np.unique(dt, return_inverse=True)
        hl = self.half_life_s
        return np.array([1.0 - 0.5 ** (d / hl) for d in gaps.tolist()])[which.reshape(-1)]
