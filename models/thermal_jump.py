"""A heat path that fails at once: the die warming at steady power.

A GPU's die sits ``die_c_per_w`` x its power above its heat sink within a second of
any power change, and the sink follows power through the heat path's time constant
(``thermal_tau_s``, tens of seconds: collectors/sim/hardware.py). A healthy GPU
therefore warms only when its power rises: at once by the die's jump, then by the
sink's approach to its new level. A fan, pump or cold plate that stops raises the
heat path's resistance at constant power, and the sink climbs from the level it
held: by R_extra x P / (C x R_new) °C/s at first (C the sink's heat capacity), which
for a doubled resistance is about a third of the sink's own rise per second-of-tau,
several degrees in ten seconds at full load.

So the rise judged here is the die temperature's climb over the last
``WINDOW_S`` or more (since a reference sample at least that old), less what the
GPU's own power explains: the die's jump (``die_c_per_w`` x the power's change), and
whatever the sink could still be climbing from earlier power steps and this one
(``ALLOW_C_PER_W`` x how far the power is above the lagged power the sink followed
then, times the share of the approach the elapsed time allows, plus the same per
watt of rise since the reference: the die's jump differs by part, 0.024 °C/W on a
real H100, 0.047 on the simulated A100). It fires past ``RISE_MIN_C``: NVML reads
whole degrees, so a steady reading moves a degree at each end and noise adds one.

The sampled powers miss what happens between samples: a job's checkpoint pause (100 W for
12-20 s, every ten minutes or so) that falls between two 15-30 s scrapes cools the sink
unseen, and it warms back 3-6 °C at steady sampled power. Two things tell that from a
failed cooler. The GPU's energy counter (``gpu_energy_j``, NVML's total energy): its mean
power over each interval is what the sink followed, a pause showing as a mean well below
the samples, so the lagged power follows the mean where the counter is read
(``lagged_power``). And a failed cooler is one GPU's: a climb that its node's peers at a
like power share in the same sample is the job's or the node's air, so a GPU is judged on
its climb past its peers' median (``beyond_peers``).

What this cannot see within seconds: a lightly loaded GPU. The climb scales with
its power: at 60-100 W (idle, communication or input-bound phases) a doubled
resistance adds 6-10 °C in all, 1-2 °C in the first ten seconds, a whole-degree
step like any other; the peer and thermal-health rules find it over minutes.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fleetwatch.models.batch import ewma_weight

# The shortest span a climb is judged over (s): the reference is the newest sample at
# least this old. One sample's step at a 15 s scrape; ten seconds of samples at 1 s.
WINDOW_S = 10.0
# A reference older than this (a gap in the samples) is no reference: start again.
MAX_AGE_S = 60.0
# The climb past what power explains that alarms (°C): three whole-degree steps.
RISE_MIN_C = 3.0
# Of each watt the power rose by (since the reference, and above the lagged power the
# sink followed), the most its heat path may add: the sink's share of a heat path of
# 0.1 °C/W (an A100 SXM4 in its air) less the part of the die's jump already removed.
ALLOW_C_PER_W = 0.065
# Power may not have moved more than this since the reference (W), up or down: past it
# the die's jump swamps a heat path's failure, its °C/W not known to better than tens of
# percent (die_c_per_w 0.035; a real H100's 0.024: a 700 W to 140 W step taken back with
# 0.035 reads as a 6 °C climb of its sink).
STEP_W = 60.0


# A node peer runs at a like power: within STEP_W or this share of the GPU's own.
PEER_POWER_FRAC = 0.25


# The state columns a detector's GpuTable carries for this (``FIELDS``): two reference
# samples per GPU, a (the older) and b, each its time, die temperature less its jump over
# the sink (die_c_per_w x power), power and lagged power.
PARTS = ("ts", "sink", "watts", "plag")
# ``since``: when the GPU was first seen, or seen again after a gap.
# ``joules``: the energy counter's last reading (J).
FIELDS = {"since": np.nan, "joules": np.nan, **{f"{k}_{v}": np.nan for k in "ab" for v in PARTS}}
# Judged only from references this many thermal_tau_s after ``since``: the lagged power
# needs the power's history (a GPU first seen while it warms through a job's start has
# none, and its sink still climbs at steady power).
SETTLED_TAUS = 2.0


class Table(Protocol):
    def __getitem__(self, name: str) -> np.ndarray: ...


def reference(t: Table, s: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, ...]:
    """(age, sink, watts, lagged power) of slot ``s``'s newest anchor at least WINDOW_S
    old (NaN age where none is, or it is older than MAX_AGE_S)."""
    use_b = ts - t["b_ts"][s] >= WINDOW_S
    pick = [np.where(use_b, t["b_" + v][s], t["a_" + v][s]) for v in PARTS]
    age = ts - pick[0]
    age = np.where((age >= WINDOW_S) & (age <= MAX_AGE_S), age, np.nan)
    return age, pick[1], pick[2], pick[3]


def climb_past_power(t: Table, s: np.ndarray, ts: np.ndarray, sink: np.ndarray,
                     watts: np.ndarray, tau_s: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per GPU (slots ``s``): the sink's climb since the reference, what the power could
    explain of it, and the span (s); NaN climb and span where not judged. ``sink``: the die
    temperature less die_c_per_w x power; ``watts``: the power now."""
    age, r_sink, r_watts, r_plag = reference(t, s, ts)
    with np.errstate(invalid="ignore"):
        climb = sink - r_sink
        # The share of the approach the span allows, for a heat path a quarter quicker
        # than thermal_tau_s (a real H100's sink: 23 s; thermal_tau_s errs long).
        settle = ewma_weight(np.nan_to_num(age), 0.75 * tau_s)
        explained = ALLOW_C_PER_W * (np.maximum(watts - r_watts, 0.0)
                                     + np.maximum(watts - r_plag, 0.0) * settle)
        settled = ts - age - t["since"][s] >= SETTLED_TAUS * tau_s
        judged = np.isfinite(age) & np.isfinite(climb) & settled \
            & ~(np.abs(watts - r_watts) > STEP_W)
    return np.where(judged, climb, np.nan), explained, np.where(judged, age, np.nan)


def advance(t: Table, s: np.ndarray, ts: np.ndarray, sink: np.ndarray, watts: np.ndarray,
            plag: np.ndarray) -> None:
    """Keep the samples (slots ``s``, each once) as anchors: as b when WINDOW_S or more
    newer than the last b (which becomes a), so that a reference WINDOW_S to 2 x WINDOW_S
    old is there at any scrape interval; a GPU seen again after MAX_AGE_S starts afresh."""
    last = t["b_ts"][s]
    stale = ~(ts - last <= MAX_AGE_S)
    shift = stale | (ts - last >= WINDOW_S)
    ss = s[shift]
    t["since"][s[stale]] = ts[stale]
    for v, new in zip(PARTS, (ts, sink, watts, plag)):
        t["a_" + v][ss] = np.where(stale[shift], np.nan, t["b_" + v][ss])
        t["b_" + v][ss] = new[shift]


def lagged_power(t: Table, s: np.ndarray, dt: np.ndarray, watts: np.ndarray,
                 joules: np.ndarray, tau_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(the lagged power now, the lagged power an anchor at this sample keeps) per GPU: the
    power the sink followed, an average with time constant tau_s of the energy counter's
    mean power over each interval where it reads one, else of the sampled power. The
    anchor keeps the lower of that and the lagged power before this sample (the sampled
    power may have stepped at any time since the last one, the sink not yet following it).
    ``joules``: the counter now (NaN: none); its last reading is kept here."""
    last, prev = t["plag"][s], t["joules"][s]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (joules - prev) / dt
        # A counter that is frozen, reset (a driver reload) or jumps is no mean power.
        sane = (dt > 0) & (dt <= MAX_AGE_S) & (mean > 0) \
            & (mean <= 1.5 * np.fmax(watts, t["watts"][s]) + 100.0)
        drawn = np.where(sane, mean, watts)
        plag = np.where(np.isnan(last), watts,
                        last + ewma_weight(np.nan_to_num(dt), tau_s) * (drawn - last))
        before = np.where(np.isnan(last), watts, last)
        anchor = np.where(sane, np.fmin(before, plag), before)
    seen = np.isfinite(joules) & ~(dt <= 0)
    t["joules"][s[seen]] = joules[seen]
    return plag, anchor


def beyond_peers(excess: np.ndarray, watts: np.ndarray) -> np.ndarray:
    """Each GPU's climb past what its power explains (``excess``, rows: a node's frame),
    less the median of its node peers' (the other GPUs of the row judged in that sample at
    a like power) where that is positive: a climb the node's GPUs share is their job's
    unseen power or their air, not one GPU's cooling. Only where ``excess`` reaches
    RISE_MIN_C (the rest are not judged further)."""
    out = excess.copy()
    with np.errstate(invalid="ignore"):
        rows, cols = np.nonzero(excess >= RISE_MIN_C)
    for i, j in zip(rows.tolist(), cols.tolist()):
        w, e = watts[i], excess[i]
        with np.errstate(invalid="ignore"):
            like = np.isfinite(e) & (np.abs(w - w[j]) <= max(STEP_W, PEER_POWER_FRAC * w[j]))
        like[j] = False
        if like.any():
            out[i, j] -= max(float(np.median(e[like])), 0.0)
    return out
