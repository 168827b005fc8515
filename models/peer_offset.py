"""A GPU's learned offset from its peers as a function of its power: a + b x P.

How much warmer or cooler a GPU runs than its peers comes from its heat path and its
place: a thermal resistance R a few percent above theirs adds dR x P (a degree or two at
idle, three or four at full power on an A100's 0.10 °C/W), and air its neighbours warmed
adds a part that grows with their power too. So a GPU may run a degree cool at low power
and three warm at full power, healthy at both; an offset learned as one constant at one
power pages it at the other.

The fit is robust and its state bounded: per GPU, one robust running location of the
excess (own - peers' median) in each of a few power bins (``EDGES_W``), with the bin's
mean power and its evidence (seconds, forgotten over ``peer_offset_forget_s``); the
offset is the line through the bins, weighted by their evidence (each power range counts
once it has ``warmup_s`` of it, however long the GPU spent there). So a power level the
GPU has not run at for a day is learned anew, within its first ``warmup_s`` (fast, as a
GPU's first minutes are), while one it runs at often learns over the forgetting horizon:
a heat path degrading at a power (R rising: the excess growing at the same power) is not
learned as the GPU's way any faster than with one constant. Each step of a bin is clipped
(``HUBER_C``) so a transient sample moves it little, and the line is not extrapolated
beyond the powers the GPU has run at (a degree of noise between 60 W and 150 W, scaled up
to 700 W, would excuse a fault).
"""

from __future__ import annotations

import numpy as np

# Bin edges (W): A100s run 50-500 W, H100s up to 700 W; a phase's power falls in one bin.
EDGES_W = np.array([100.0, 200.0, 300.0, 400.0, 550.0])
BINS = len(EDGES_W) + 1
HUBER_C = 2.0     # °C: the most of one sample's distance from its bin's value learned at once
RIDGE_W = 100.0   # power scale below which the slope is shrunk toward zero
RIDGE_C0 = 0.05   # a light pull of the constant part toward zero
EMPTY_S = 1.0     # evidence (s) under which a bin is taken as never seen
# Of the whole heat path's °C/W (peer_c_per_w): how much steeper or flatter than its peers'
# a healthy GPU's may be. Heat paths of one part differ by some percent (the simulated
# A100s +-8 %: 0.008 of 0.10 °C/W); 10 % of the 0.06 credited is 0.006 °C/W, 2 °C between
# an A100's 100 W and 450 W, learned at once in a new power range (the rest over the day).
SLOPE_SHARE = 0.10

# The GpuTable fields: per bin, its evidence (s), its excess (°C) and its mean power (W).
FIELDS = {"ow": 0.0, "om": 0.0, "op": 0.0}
SHAPES = {k: (BINS,) for k in FIELDS}


def offset_at(ev: np.ndarray, m: np.ndarray, pw: np.ndarray, p: np.ndarray,
              full_s: float) -> np.ndarray:
    """The offset at power ``p`` (...,) from the bins' evidence ``ev``, excess ``m`` and
    power ``pw`` (..., BINS): the weighted least-squares line (ridge on both terms), taken
    at ``p`` clipped to the powers seen. 0 where nothing was learned."""
    v = np.minimum(ev, full_s) / max(full_s, 1.0)
    s0 = v.sum(-1) + RIDGE_C0
    s1 = (v * pw).sum(-1)
    s2 = (v * pw * pw).sum(-1) + RIDGE_W ** 2
    sm = (v * m).sum(-1)
    smp = (v * m * pw).sum(-1)
    det = s0 * s2 - s1 * s1
    a = (s2 * sm - s1 * smp) / det
    b = (s0 * smp - s1 * sm) / det
    seen = ev >= EMPTY_S
    lo = np.where(seen, pw, np.inf).min(-1)
    hi = np.where(seen, pw, -np.inf).max(-1)
    at = np.where(seen.any(-1), np.clip(p, lo, np.maximum(lo, hi)), p)
    return a + b * at


def unsure(ev: np.ndarray, pw: np.ndarray, p: np.ndarray, full_s: float,
           slope_max: float) -> np.ndarray:
    """How far the offset at power ``p`` (...,) may be from the GPU's own, where the bin of
    ``p`` is still young: heat paths of one part differ by up to ``slope_max`` (°C/W), so
    the line carried from the nearest learned bin may miss by ``slope_max`` x that distance,
    less as the young bin gathers its ``full_s`` of evidence. 0 where the bin of ``p`` is
    learned, or none is (then the GPU is judged as the warmest may run, not by its offset)."""
    learned = ev >= full_s
    k = np.searchsorted(EDGES_W, p, side="right")
    own = np.take_along_axis(ev, k[..., None], -1)[..., 0]
    lack = 1.0 - np.minimum(own, full_s) / max(full_s, 1.0)
    far = np.where(learned, np.abs(pw - p[..., None]), np.inf).min(-1)
    return np.where(learned.any(-1), slope_max * np.where(np.isfinite(far), far, 0.0) * lack,
                    0.0)


def learn(ev: np.ndarray, m: np.ndarray, pw: np.ndarray, d: np.ndarray, p: np.ndarray,
          step: np.ndarray, first: np.ndarray, prior: np.ndarray, forget_s: float,
          warmup_s: float, slope_max: float) -> None:
    """One quiet sample of each GPU (n,): its excess ``d`` at lagged power ``p``, ``step``
    seconds after its last (``first``: it has none); ``prior``: its offset at ``p`` now.
    Updates the (n, BINS) arrays in place.

    Every bin's evidence fades over ``forget_s``. The sample's bin learns at the pace of
    a GPU's warm-up (``warmup_s`` / 4, as an average) until it holds ``warmup_s`` of
    evidence, over ``forget_s`` after that; a bin never seen (or forgotten) starts from the
    line the others give (``prior``), or from the sample for a GPU with no bin at all.

    What a young bin learns is held within ``slope_max`` (°C/W) x its distance in power
    from the bins learned already, of their line: a heat path differs from its peers' by
    some percent of its °C/W, so that much is a GPU's own; more, learned in a power range
    the GPU had not run at, would be a heat path failing while it got there (or a job
    phase's first minutes), and learned, it would excuse the fault from then on.
    """
    n = len(d)
    if n == 0:
        return
    ev *= np.exp(-step / forget_s)[:, None]
    rows = np.arange(n)
    k = np.searchsorted(EDGES_W, p, side="right")
    e, mk, pk = ev[rows, k], m[rows, k], pw[rows, k]
    empty = e < EMPTY_S
    start = np.where((ev >= EMPTY_S).any(-1), prior, d)
    mk = np.where(empty, start, mk)
    pk = np.where(empty, p, pk)
    young = e < warmup_s
    tau = np.where(young, max(warmup_s / 4.0, 1.0), forget_s)
    gain = np.where(first, 1.0, -np.expm1(-step / tau))
    y = np.flatnonzero(young & (ev >= warmup_s).any(-1))  # young, beside learned bins
    if len(y):
        d = d.copy()
        d[y] = _held(ev[y], m[y], pw[y], d[y], p[y], warmup_s, slope_max)
    m[rows, k] = mk + gain * np.clip(d - mk, -HUBER_C, HUBER_C)
    pw[rows, k] = pk + gain * (p - pk)
    ev[rows, k] = e + np.maximum(step, np.where(first, EMPTY_S, 0.0))


def _held(ev: np.ndarray, m: np.ndarray, pw: np.ndarray, d: np.ndarray, p: np.ndarray,
          warmup_s: float, slope_max: float) -> np.ndarray:
    """``d`` held within ``slope_max`` x the distance from ``p`` to the nearest learned
    bin's power, of the learned bins' line at ``p`` (each GPU has one or more)."""
    learned = ev >= warmup_s
    line = offset_at(np.where(learned, ev, 0.0), m, pw, p, warmup_s)
    room = slope_max * np.where(learned, np.abs(pw - p[:, None]), np.inf).min(-1)
    return np.clip(d, line - room, line + room)
