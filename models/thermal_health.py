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
A GPU the training never saw (a node added since, another cluster, a replay)
learns its offset online from its own first hour of samples, the way training
does (the median of its one-minute mean residuals), and is judged after that.
So does a board put in a slot in place of another (its UUID changed) since the
training began: the trained offset is the old board's (or a mix), and a new board
judged by a hot one's would hide its own overheating by that much.

``ThermalModel`` (``fleetwatch.models.thermal_model``) is the trained part;
``ThermalHealth`` is the detector that scores frames with it in the processor,
a whole batch at a time from the batch's arrays (``models/batch.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import is_

import numpy as np

from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.batch import COL, Batch, columns
from fleetwatch.models.board_swaps import BoardSwaps
from fleetwatch.models.gpu_state import arrival, node_rows, row_median, waves
from fleetwatch.models.lemon import EventReader

# Model files pickle ``ThermalModel`` under this module's name: it stays importable here.
from fleetwatch.models.thermal_model import FEATURES, ThermalModel, fit_thermal, gpu_key
from fleetwatch.models.thermal_residuals import ONLINE, TRAINED, Residuals

__all__ = ["FEATURES", "SCORE_METRIC", "ThermalHealth", "ThermalModel", "features",
           "fit_thermal", "gpu_key", "node_median"]

SCORE_METRIC = "gpu_thermal_health_score"
_TEMP, _POWER, _SM, _UTIL, _CLOCK, _FAN, _LIMIT, _SLOW = (COL[n] for n in (
    "gpu_temp_c", "gpu_power_w", "gpu_sm_active_ratio", "gpu_util_pct", "gpu_sm_clock_mhz",
    "gpu_fan_pct", "gpu_power_limit_w", "gpu_slowdown_temp_c"))
NAN = math.nan


def node_median(values: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Per frame (row of ``values``, F x G): the median of its GPUs' readings where ``ok``
    (NaN: not reported), NaN with fewer than two.

    With the node's median power, its median temperature tells the model the air its
    GPUs breathe (die = air + R x power): a robust statistic, so that one GPU gone odd
    (a sensor reading 0, a stuck or throttled GPU running cool, one whose cooling
    fails) does not make the node's air look colder or warmer for every other GPU, as
    the mean of the two coolest GPUs did. As numpy's nanmedian (training's): the middle
    one, or the mean of the two middle ones.
    """
    median, n = row_median(values, ok & ~np.isnan(values))
    return np.where(n >= 2, median, NAN)


def features(b: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which GPUs of the batch have a die temperature to judge ((F, G) bool: ok and
    reporting one), their FEATURES rows in row-major order and their die temperatures."""
    x = b.x
    live = b.present & ~b.lost
    temp = x[:, :, _TEMP]
    valid = live & ~np.isnan(temp)
    fi, gj = np.nonzero(valid)
    v = x[fi, gj]
    inlet = np.fromiter((f.host.metrics.get("host_inlet_temp_c", NAN) for f in b.frames),
                        float, len(b.frames))
    sm = v[:, _SM]  # DCGM's SM_ACTIVE where reported, else NVML's utilization / 100
    rows = np.stack([v[:, _POWER], np.where(np.isnan(sm), v[:, _UTIL] / 100.0, sm),
                     v[:, _CLOCK], v[:, _FAN], node_median(temp, live)[fi],
                     node_median(x[:, :, _POWER], live)[fi], inlet[fi], v[:, _LIMIT],
                     v[:, _SLOW]], axis=1)
    return valid, rows, v[:, _TEMP]


@dataclass(slots=True)
class _Scored:
    """A batch scored, per frame as handed over (i) and GPU position (j): whether the GPU
    has a detail (smoothed at least once), the detail, and whether it was the detail of
    an earlier scoring of the same GPU at the same time (``cached``)."""

    frames: list[Frame]
    waves: list[np.ndarray]
    slots: np.ndarray
    cached: np.ndarray
    has: np.ndarray
    ewma: np.ndarray
    offset: np.ndarray
    excess: np.ndarray
    score: np.ndarray
    warm: np.ndarray
    source: np.ndarray  # where the offset came from: TRAINED or ONLINE
    predicted: np.ndarray  # the model's temperature for the sample (without the offset)

    def part(self, frames: Sequence[Frame]) -> _Scored | None:
        """What this batch's scoring found for ``frames``, if they are all among its own."""
        where = {id(f): i for i, f in enumerate(self.frames)}
        at = [where.get(id(f), -1) for f in frames]
        if -1 in at:
            return None
        i = np.asarray(at, np.int64)
        return _Scored(list(frames), waves(frames), *(a[i] for a in (
            self.slots, self.cached, self.has, self.ewma, self.offset, self.excess,
            self.score, self.warm, self.source, self.predicted)))


_RECENT = 4
_SOURCES = {TRAINED: "trained", ONLINE: "online"}


class ThermalHealth:
    """Scores each GPU's residual growth; a finding when it stays high.

    Per GPU: an exponentially weighted mean of the residual (half-life
    ``half_life_s`` of stream time: load swings and thermal lag average out)
    minus the GPU's own offset, divided by the fleet's spread: the score. It
    fires when the growth is at least ``min_excess_c`` °C and ``min_score``
    spreads, for ``for_s``.

    A GPU the model has never seen learns its own offset here, from its first
    ``baseline_s`` of minutes with samples (the median of their mean residuals,
    as training computes it), and has no score before that: some GPUs run a few
    degrees warm all their life, and scoring them against an offset of 0 would
    call a constant residual growth. Another model (a retrain) expects other
    temperatures, so such a GPU learns its offset again under it (a retrain that
    saw it gives it a trained one). What this cannot see: a GPU broken from its
    first sample here learns its fault as its normal, as it would look to a
    training that saw it only broken. Comparing it with its node's other GPUs is
    the peer rules' job (``models/peers.py``), which judge it from the start.

    Every sample is scored and judged, but the score joins the stored series
    once per ``store_every_s`` of a GPU's stream time (its first sample of
    each period; 0: every sample): it moves with a half-life of minutes, so a
    point a minute shows all of it, and a fleet sampled every second does not
    store a thirteenth series per GPU at the rate of the twelve it measures.
    ``/metrics`` and the findings always have the latest score.
    """

    name = "thermal_health"
    rules = {"thermal_health": ("gpu_temp_c", "gpu_power_w")}

    def __init__(self, model: ThermalModel | None = None, half_life_s: float = 900.0,
                 min_excess_c: float = 5.0, min_score: float = 4.0, for_s: float = 600.0,
                 warmup_s: float = 900.0, store_every_s: float = 60.0,
                 baseline_s: float = 3600.0) -> None:
        if not baseline_s >= 60.0:
            raise ValueError(f"thermal health baseline_s {baseline_s}: a GPU's own offset is "
                             "the median of its one-minute residuals; give it at least 60 s "
                             "(an hour or more is a baseline)")
        self.model = model
        self.store_every_s = store_every_s
        self.half_life_s, self.min_excess_c = half_life_s, min_excess_c
        self.min_score, self.for_s, self.warmup_s = min_score, for_s, warmup_s
        self.baseline_min = math.ceil(baseline_s / 60.0)
        self.residuals = Residuals(half_life_s, warmup_s, self.baseline_min)
        self._gpus = self.residuals.gpus
        # Per (cluster, node): its GPU indices and their trained offsets (NaN: none)
        # under ``_offsets_of``.
        self._offsets: dict[tuple[str, str], tuple[tuple[int, ...], list[float]]] = {}
        self._offsets_of: ThermalModel | None = None
        # Slots whose board was replaced, seen here or stored (``use_events``): one replaced
        # since ``trained_from`` (the model's training began; None: not known) learns its
        # own offset, the trained one being the old board's.
        self.swaps = BoardSwaps()
        self.trained_from: float | None = None
        # The last batches scored and what they gave, newest first, for ``update`` after
        # ``enrich``: the processor decodes (and enriches) a batch or two ahead of the one
        # it judges, and judges the frames of a batch that it still owns.
        self._recent: list[_Scored] = []

    @property
    def scores(self) -> dict[str, float]:
        """Each scored GPU's latest score, by ``gpu_key``."""
        scored, score = self._gpus["scored"], self._gpus["score"]
        return {gpu_key(*key): float(score[s]) for key, s in self._gpus.slot_of.items()
                if scored[s]}

    def use_events(self, events: EventReader | None) -> None:
        """The store's event reader: boards replaced before this processor met a node."""
        self.swaps.use_events(events)

    def drop(self, nodes: Sequence[str]) -> None:
        self._gpus.drop(nodes)
        gone = set(nodes)
        for key in [k for k in self._offsets if k[1] in gone]:
            del self._offsets[key]
        self.swaps.drop(gone)
        self._recent.clear()

    def enrich(self, frames: Sequence[Frame]) -> None:
        """Score ``frames`` and add each scored GPU's ``gpu_thermal_health_score`` to its
        metrics, before the processor stores them: the score is a series like any other."""
        sc = self._score(frames)
        if sc is None:
            return
        stored = self._stored(sc)
        shown = stored.any(axis=1)
        for f, row, show in zip(sc.frames, np.where(stored, sc.score, NAN).tolist(),
                                shown.tolist()):
            if show:
                gpus = f.gpus
                for j, v in enumerate(row):
                    if v == v:
                        gpus[j].metrics[SCORE_METRIC] = round(v, 3)

    def _stored(self, sc: _Scored) -> np.ndarray:
        """Which scores of ``sc`` join their frames: each GPU's first sample of a
        ``store_every_s`` period, by stream time, so a replay stores the same points.
        A sample older than the GPU's last stored one adds none (its period has its
        point); the last stored one, delivered again, is stored again, the same."""
        every = self.store_every_s
        if every <= 0:
            return sc.has
        out = np.zeros_like(sc.has)
        ts = np.fromiter((f.ts for f in sc.frames), float, len(sc.frames))
        last = self._gpus["stored"]
        for wave in sc.waves:  # each GPU's samples in time order
            wi, gj = np.nonzero(sc.has[wave])
            if not len(wi):
                continue
            i = wave[wi]
            s, t = sc.slots[i, gj], ts[i]
            before = last[s]
            new = np.isnan(before) | (t == before)
            new[~new] = np.floor(t[~new] / every) > np.floor(before[~new] / every)
            out[i[new], gj[new]] = True
            last[s[new]] = t[new]
        return out

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        sc = self._score(frames)
        if sc is None:
            return []
        held = self._gpus["held"]
        out: list[Finding] = []
        # The GPUs scored earlier at the same time first, then the others, each in the
        # order handed over: the order the findings and the hysteresis always had.
        for cached in (True, False):
            fired = np.zeros_like(sc.has)
            needs = np.ones(sc.has.shape)
            for wave in sc.waves:
                wi, gj = np.nonzero(sc.has[wave] & (sc.cached[wave] == cached))
                if not len(wi):
                    continue
                i = wave[wi]
                s = sc.slots[i, gj]
                # Hysteresis: a GPU already flagged stays flagged until its excess falls
                # under half the thresholds. A degrading cold plate hovers around any
                # threshold for hours (load swings move the smoothed residual by a degree
                # or two): without it the alert would resolve and fire again, over and over.
                need = np.where(held[s], 0.5, 1.0)
                fire = (sc.warm[i, gj] & (sc.excess[i, gj] >= need * self.min_excess_c)
                        & (sc.score[i, gj] >= need * self.min_score))
                held[s] = fire
                needs[i, gj] = need
                fired[i[fire], gj[fire]] = True
            out.extend(self._finding(sc, i, j, float(needs[i, j]))
                       for i, j in zip(*np.nonzero(fired)))
        return out

    def _finding(self, sc: _Scored, i: int, j: int, need: float) -> Finding:
        """The finding: the smoothed excess, the temperature now and the one expected,
        the fleet's spread that makes the score, and the thresholds it passed (``need``:
        1, or 0.5 while the alert holds: hysteresis)."""
        assert self.model is not None
        f = sc.frames[i]
        gpu = f.gpus[j].index
        ewma, offset, excess, score, predicted = (float(a[i, j]) for a in (
            sc.ewma, sc.offset, sc.excess, sc.score, sc.predicted))
        # The offset is trained (the model's, for this GPU) or online (learned here from
        # the GPU's own first hour, as the model never saw it).
        source = _SOURCES[float(sc.source[i, j])]
        temp = float(f.gpus[j].metrics.get("gpu_temp_c", NAN))
        expected = predicted + offset
        spread = self.model.spread_c
        return Finding(
            self.name, f.cluster, f.rack, f.node, gpu, f.ts, round(score, 2),
            f"GPU {gpu} on {f.node} runs {excess:.1f} °C hotter than its load and air "
            f"explain, averaged over minutes (half-life {self.half_life_s:.0f} s): its "
            f"smoothed residual {ewma:+.1f} °C less its {source} offset {offset:+.1f} °C "
            f"(the latest sample alone: {temp:.1f} °C against {expected:.1f} °C expected); "
            f"score {score:.1f} = that excess over the fleet's residual spread of "
            f"{spread:.2f} °C; {'holds while' if need < 1 else 'fires at'} "
            f">= {need * self.min_excess_c:.1f} °C and score >= {need * self.min_score:.1f}",
            "warning", self.for_s,
            evidence={"temp_c": round(temp, 2), "expected_c": round(expected, 2),
                      "excess_c": round(excess, 2), "spread_c": round(spread, 3),
                      "score": round(score, 2),
                      "fire_excess_c": need * self.min_excess_c,
                      "fire_score": need * self.min_score,
                      "residual_c": round(ewma, 2), "offset_c": round(offset, 2),
                      "offset_online": float(sc.source[i, j] == ONLINE)},
            action="Check the GPU's cooling (fan, cold plate, airflow, dust) at the "
                   "next maintenance window; it is degrading before any limit trips.")

    def _score(self, frames: Sequence[Frame]) -> _Scored | None:
        """Per GPU of ``frames``: (ewma residual, offset, excess, score, warm) where it has
        one (not before its first smoothing step). Scoring frames of one of the last
        batches again (``enrich`` then ``update``) returns what the first pass found,
        without counting them twice; a GPU already scored at a frame's time (a frame
        delivered again) gets what it got then."""
        model = self.model
        if model is None or not frames:
            return None
        for sc in self._recent:  # frames scored already: enrich, then update
            if len(sc.frames) == len(frames) and all(map(is_, frames, sc.frames)):
                return sc
        for sc in self._recent:
            if (part := sc.part(frames)) is not None:
                return part
        b = columns(frames)
        order = arrival(frames, b)
        n, width = len(frames), b.x.shape[1]
        slots = self._gpus.slots(b)[order.rows]
        self.swaps.recall(frames)
        self.swaps.saw(self._gpus.replaced, float(b.ts[-1]))
        valid, rows, temps = features(b)
        residual, predicted = np.full(valid.shape, NAN), np.full(valid.shape, NAN)
        if len(temps):
            predicted[valid] = model.expected(rows)
            residual[valid] = temps - predicted[valid]
        residual, valid = residual[order.rows], valid[order.rows]
        offsets = self._node_offsets(b, model)[order.rows]
        swapped = self.swaps.since(self.trained_from) if self.swaps.at else ()
        if swapped:  # from the new board's first frame on (a new slot): not the old's
            slot_of = self._gpus.slot_of
            offsets[np.isin(slots, [slot_of[k] for k in swapped if k in slot_of])] = NAN
        ts = b.ts[order.rows]
        g = self._gpus
        # Scored earlier at the same time: what the batch started with.
        cached = valid & (g["at"][slots] == ts[:, None])
        sc = _Scored(list(frames), order.waves, slots, cached, np.zeros((n, width), bool),
                     *(np.full((n, width), NAN) for _ in range(4)), np.zeros((n, width), bool),
                     np.full((n, width), NAN), predicted[order.rows])
        details = ("has", "ewma", "offset", "excess", "score", "warm", "source")
        s = slots[cached]
        for name in details:
            getattr(sc, name)[cached] = g["d_" + name][s]
        fresh = valid & ~cached
        for wave in order.waves:
            wi, gj = np.nonzero(fresh[wave])
            if len(wi):
                i = wave[wi]
                s = slots[i, gj]
                self.residuals.advance(s, ts[i], residual[i, gj], offsets[i, gj], model.spread_c)
                for name in details:
                    getattr(sc, name)[i, gj] = g["d_" + name][s]
        # Holding the frames keeps their ids from being reused by the next batches'.
        self._recent.insert(0, sc)
        del self._recent[_RECENT:]
        return sc

    def _node_offsets(self, b: Batch, model: ThermalModel) -> np.ndarray:
        """(F, G): each GPU's trained lifelong offset, NaN for a GPU the model has never
        seen (it learns its own: ``Residuals._baseline``)."""
        if self._offsets_of is not model:
            self._offsets.clear()
            if self._offsets_of is not None:
                self._relearn(model)
            self._offsets_of = model
        offsets = model.offsets
        return node_rows(b, self._offsets, lambda f, ids: [
            offsets.get(gpu_key(f.cluster, f.node, g), NAN) for g in ids], NAN, float)

    def _relearn(self, model: ThermalModel) -> None:
        """Another model: an offset learned online is a residual under the one before, so
        every GPU that this one has not seen learns its offset again under it, with no
        score (the old model's is not this one's) until it has."""
        g = self._gpus
        every = np.fromiter(g.slot_of.values(), np.int64, len(g.slot_of))
        swapped = set(self.swaps.since(self.trained_from))
        unseen = np.fromiter((gpu_key(*k) not in model.offsets or k in swapped
                              for k in g.slot_of), bool, len(g.slot_of))
        g["own"][every] = NAN
        self.residuals.forget_baseline(every)
        u = every[unseen]
        g["scored"][u], g["score"][u], g["held"][u] = False, NAN, False
