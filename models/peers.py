"""Peer-relative thermal detection: a GPU against the other GPUs of its node.

GPUs of one node share the node's air or coolant whatever job they run and, in
data-parallel training, the same load, so their temperatures move together
through job phases and the day's inlet swings. A GPU whose cooling fails
stands out from them long before it reaches a fixed limit (the Acme study saw
NVLink and ECC errors at or below 80 °C). The comparison:

* the die sits ``die_c_per_w`` x its power above its heat sink, within a second
  of any power change, and the sink follows power through a lag of tens of
  seconds (a real H100 took 15 of a 34 °C rise at once, the rest with a 23 s
  time constant: ``collectors/sim/hardware.py``). Each reading is first taken
  back to its sink's: the die's jump over the power smoothed with
  ``thermal_tau_s`` is removed, so a GPU that drew more than its peers in the
  sampled second is not called hot for it;
* peers are the node's other GPUs of the same model in the same job, and where
  it has fewer than ``min_peers`` of those (an inference node, each pod its own
  job), those of other jobs within the power tolerance of it (``heat_peers``);
  of them, those drawing as much *lagged* power or more (for "too hot"; as
  little or less, for "reads too low"): the sink's temperature reflects the
  lagged power, a busy GPU is not compared with an idle one of its job, and a GPU
  the driver holds down for heat (drawing less) stays judged by its job's peers;
* each GPU carries a learned offset, a constant (air its neighbours warmed)
  plus a part proportional to its power (a slightly worse heat path runs a few
  degrees warmer at full load, the same at idle), clamped to ``max_offset_c``
  so a fault cannot be learned away: a line through a few power bins
  (``peer_offset``), each learned within minutes the first time the GPU runs at that
  power, then forgotten over ``peer_offset_forget_s`` (a day): how warm a GPU runs
  is a property of its heat path and its place, and a forgetting of hours learned a
  heat path degrading over hours as the GPU's own warmth;
* excess = own temperature - offset - median of the peers' (the same, for
  them, plus ``peer_c_per_w`` for each watt this GPU draws above a peer); it
  alarms above a robust margin: max(peer_margin_c, peer_k x MAD), widened while
  the node heats or cools through a job phase;
* a heat path that degrades slowly holds its GPU a few degrees over its peers
  sample after sample: a one-sided CUSUM of the excess over ``peer_drift_allow_c``
  (°C x minutes) alarms past ``peer_drift_sum_c_min``, under the margin. The
  allowance sits above what healthy GPUs hold for minutes at a time (a job phase
  whose power differs from the one their offset was learned at: up to +4.6 °C).
"""

from __future__ import annotations

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.models import Finding, peer_offset
from fleetwatch.models.batch import COL, Batch, ewma_weight
from fleetwatch.models.gpu_slots import GpuTable, WaveDetector
from fleetwatch.models.peer_findings import peer_findings
from fleetwatch.models.peer_rack import wide_peers
from fleetwatch.models.peer_stats import (
    heat_peers,
    peer_count,
    peer_median,
    peer_median_block,
)
from fleetwatch.models.thermal import LimitTable

TEMP, POWER = COL["gpu_temp_c"], COL["gpu_power_w"]
MAD_SIGMA = 1.4826  # MAD of a normal sample times this estimates its standard deviation
TRANSIENT_SHARE = 0.5  # of the peers' motion, added to the margin (see _wave)
MAX_STEP_S = 60.0      # a gap longer than this adds no more than this to the warm-up time
HYSTERESIS_C = 1.0     # degrees below a threshold a latched finding must fall to clear
NOMINAL_W = 300.0      # the power assumed for GPUs whose power is not reported
BUSY_W = 100.0         # lagged power above which a GPU counts as busy
RISE_SHARE = 0.6       # of the margin: enough excess to call a fast climb critical
COOL_CREDIT_C = 3.0    # the most a GPU's learned offset may sit below its peers
# Away from its lagged temperature by at most this (itself and its peers' median), a GPU
# is steady enough to learn its offset from: whole-degree readings and a quarter degree of
# noise a sample stay within it, a job phase's change of power does not.
STEADY_C = 1.5
# The rise that alerts state (message, evidence): over about this long, so that at any
# scrape interval it is the climb, not one sample's step scaled up to a minute (the fast
# path's own rise, over peer_rise_window_s, is left as tuned).
RISE_EVIDENCE_S = 120.0
# The fast path's climb must be held over two samples or more and total more than this:
# NVML reads whole degrees, so one sample can move the excess by a degree of the GPU's own
# reading plus one of its peers' median with no change in either, and noise adds a degree.
CLIMB_MIN_C = 3.0
# ... unless one sample climbs twice that: no reading step fakes it (at a 15 s scrape, a
# heat path that fails at once shows most of its climb in the first sample).
ONE_SAMPLE_CLIMB_C = 2.0 * CLIMB_MIN_C


class ThermalPeers(WaveDetector):
    name = "thermal_peers"
    rules = {"gpu_hot_vs_peers": ("gpu_temp_c",),
             "gpu_hot_vs_peers_critical": ("gpu_temp_c",),
             "gpu_temp_sensor_low": ("gpu_temp_c",)}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self.table = GpuTable(shapes=peer_offset.SHAPES, **peer_offset.FIELDS,
                              ts=np.nan, plag=np.nan, tlag=np.nan, warm=0.0, warm_busy=0.0,
                              smooth=np.nan, sts=np.nan, hot=0.0, crit=0.0,
                              rise_avg=np.nan, last=np.nan, fast=0.0, run_from=np.nan,
                              run_ts=np.nan, drift=0.0)
        self.limits = LimitTable(self.c)

    def _wave(self, b: Batch, rows: np.ndarray, slots: np.ndarray, out: list[Finding]) -> None:
        c, t = self.c, self.table
        x = b.x[rows]
        temp, power = x[..., TEMP], x[..., POWER]
        # Recorded series may carry temperature only: such GPUs are compared with each other
        # (same job) as if at one nominal power, never with GPUs that report power.
        metered = np.isfinite(power)
        power = np.where(metered, power, NOMINAL_W)
        s = np.where(slots >= 0, slots, 0)
        ts = np.broadcast_to(b.ts[rows][:, None], temp.shape)
        dt = ts - t["ts"][s]
        # A reading no working GPU gives (0, or 255 °C: thermal_limits calls it a failing
        # sensor) is neither judged, nor a peer, nor learned.
        fresh = (slots >= 0) & np.isfinite(temp) & np.isfinite(power) & ~b.lost[rows] \
            & self.limits.readable(b, rows, temp) & ~(dt <= 0)
        known = np.isfinite(dt)
        w = np.where(known, ewma_weight(dt, c.thermal_tau_s), 1.0)
        prev = t["plag"][s]
        plag = np.where(np.isnan(prev), power, prev + w * (power - prev))
        # The heat sink's temperature: the reading less the die's jump over it since the
        # lagged power (0 for a GPU whose power is not reported: power is NOMINAL_W then).
        read, temp = temp, temp - c.die_c_per_w * (power - plag)
        prev = t["tlag"][s]
        tlag = np.where(np.isnan(prev), temp, prev + w * (temp - prev))
        tol = np.maximum(c.peer_power_tol_w, c.peer_power_tol_frac * plag)
        # A GPU hotter than peers drawing as much power or more is hot whatever its own
        # power (one held down by the driver for heat draws less, and stays judged); one
        # cooler than peers drawing as little or less reads low. [f, i, j]: plag_j - plag_i.
        # Of the same model only: heat paths differ by part (an A100 SXM4 about 0.10 °C/W
        # above its air, from the telegraf capture; the recorded H100 0.054: at the same
        # 400 W some 19 °C apart, collectors/sim/hardware.py), far more than a learned
        # offset may excuse, so "hotter than its peers" across parts says nothing.
        # Of the node's GPUs: those of its job first, others at about its power where its
        # job has too few (an inference node's pods: peer_stats.heat_peers).
        # Across jobs, only GPUs within peer_power_tol_w of each other's lagged power, whose
        # power has settled as near its lagged power (a 500 W step settles in about two
        # thermal_tau_s): peer_c_per_w credits a difference of power only roughly (the
        # heat path's °C/W differs by part and by GPU: an A100's 0.10, 0.06 credited), which
        # one job's GPUs, drawing alike, never lean on, and pods on their own loads would.
        settled = np.abs(power - plag) <= c.peer_power_tol_w
        same, other = heat_peers(b, rows, fresh, metered, plag, c.min_peers,
                                 c.peer_power_tol_w, settled)
        more = plag[:, None, :] - plag[:, :, None]
        peers = same & (more >= -tol[:, :, None])
        below = same & (more <= tol[:, :, None])
        # A GPU that runs warm is excused up to max_offset_c; one that runs cool is held to
        # at most COOL_CREDIT_C under its peers, so that "hot against its peers" always
        # means hotter than they are (heat paths differ by a few percent: an offset learned
        # far below that comes from transients, and would page on a GPU cooler than its peers).
        usual = offset = np.clip(self._offset(s, plag), -min(COOL_CREDIT_C, c.max_offset_c),
                                 c.max_offset_c)
        adj = np.where(fresh, temp - offset, np.nan)
        # Judged by its learned offset once that is learned: for a busy GPU, learned while
        # busy (its offset at idle says little about its offset at full power). Until then
        # it is judged as the warmest healthy GPU may run, max_offset_c: a heat path that
        # is already failing when a job starts on it (a node back from repair with a bad
        # fan) is not learned as the GPU's way, and pages as soon as it is out that far.
        busy = plag >= BUSY_W
        warm = (t["warm"][s] >= c.warmup_s) & (~busy | (t["warm_busy"][s] >= c.warmup_s))
        offset = np.where(warm, offset, c.max_offset_c)
        own = np.where(fresh, temp - offset, np.nan)
        # A GPU drawing more than a peer runs warmer by about R x the difference: credit it
        # (never the other way within its job, so one the driver holds down for heat is not
        # excused). A peer of another job draws what its own load asks: it is taken to this
        # GPU's power either way, or a GPU among busier pods would learn to run cool and
        # then page once they draw what it draws.
        credit = np.maximum(-more, 0.0)
        if other is not None:
            credit = np.where(other, -more, credit)
        expected = adj[:, None, :] + c.peer_c_per_w * credit                    # [f, i, j]
        count = peer_count(peers)
        median = peer_median_block(expected, peers, count)
        mad = peer_median_block(np.abs(expected - median[..., None]), peers, count)
        # While a node heats or cools through a job phase, GPUs with slightly different time
        # constants part by a few degrees: widen the margin by a share of how fast the
        # peers themselves are moving (their distance from their own lagged temperature).
        g = temp.shape[1]
        moving = np.abs(temp - tlag)
        motion = np.nan_to_num(peer_median_block(
            np.broadcast_to(moving[:, None, :], (len(temp), g, g)), peers, count))
        # Too few on its node to compare with (a small inference node; a GPU that merely
        # draws more than its job's others has them): its rack's, else its
        # cluster's GPUs of its part at its power, each at its own node's inlet air
        # (models/peer_rack.py).
        scope = np.zeros(count.shape, np.intp)
        able = fresh & metered & settled
        need = able & (peer_count(same) < c.min_peers)
        if need.any():
            wm, wd, wc, wv, scope = wide_peers(b, rows, need, able, adj, plag, moving,
                                               c.peer_power_tol_w, c.peer_c_per_w,
                                               c.min_peers)
            wide = scope > 0
            median, mad = np.where(wide, wm, median), np.where(wide, wd, mad)
            count, motion = np.where(wide, wc, count), np.where(wide, wv, motion)
        judged = fresh & (count >= c.min_peers)
        excess = np.where(judged, own - median, 0.0)
        # Its rise is measured on the learned offset throughout, so that the step from
        # max_offset_c to the learned offset at the end of the warm-up is no rise.
        learned = np.where(judged, adj - median, 0.0)
        base = np.maximum(c.peer_margin_c, c.peer_k * MAD_SIGMA * np.nan_to_num(mad))
        # At a power the GPU has not yet run at long enough to learn its offset there (a
        # node whose job phases were too short to settle in), the offset is the line from
        # the powers it knows, right only to within how much heat paths of one part differ
        # (peer_offset.unsure): that much more excess is no sign of a failing heat path,
        # neither for the margin nor for the drift test, until the power's bin is learned.
        young = np.where(warm, self._unsure(s, plag), 0.0)
        margin = base + TRANSIENT_SHARE * motion + young
        # Rise of the excess, from its average over rise_window_s (as in ThermalLimits).
        sdt = ts - t["sts"][s]
        sw = np.where(np.isfinite(sdt) & (sdt > 0), ewma_weight(sdt, c.peer_rise_window_s), 1.0)
        old = t["smooth"][s]
        smooth = np.where(np.isnan(old), learned, old + sw * (learned - old))
        with np.errstate(invalid="ignore", divide="ignore"):
            slope = np.where(sw < 1.0, (learned - smooth) * sw
                             / ((1.0 - sw) * np.maximum(sdt, 1e-9)), 0.0) * 60.0
        # The same over RISE_EVIDENCE_S: a ramp's rate, for people to read.
        rw = np.where(np.isfinite(sdt) & (sdt > 0), ewma_weight(sdt, RISE_EVIDENCE_S), 1.0)
        old = t["rise_avg"][s]
        rise_avg = np.where(np.isnan(old), learned, old + rw * (learned - old))
        with np.errstate(invalid="ignore", divide="ignore"):
            rise = np.where(rw < 1.0, (learned - rise_avg) * rw
                            / ((1.0 - rw) * np.maximum(sdt, 1e-9)), 0.0) * 60.0
        # Hysteresis: a GPU hovering at a threshold (as one held at its slowdown point by
        # the driver does) keeps one alert instead of raising one a minute.
        was_hot, was_crit = t["hot"][s] > 0, t["crit"][s] > 0
        drift, drifting = self._drift(s, judged & warm,
                                      excess - TRANSIENT_SHARE * motion - young,
                                      dt)
        hot = judged & ((excess > margin - HYSTERESIS_C * was_hot) | drifting)
        critical_c = np.maximum(c.peer_critical_c, margin)
        # Critical: far out, or pulling away from its peers fast (a heat path that just
        # failed: the first samples already climb while the peers' do not), which is
        # judged from RISE_SHARE of the margin so it fires within a sample or two. While
        # the peers themselves move (a job phase starting), a GPU with a shorter time
        # constant than theirs climbs ahead of them for a sample or two: the fast path
        # then needs the whole of that motion on top. A GPU drawing more or less than its
        # lagged power also needs what that difference could explain (peer_c_per_w, the
        # whole heat path's °C/W): the die's jump per watt differs by part (a real H100:
        # 0.024 °C/W) and its heat sink moves within a long sample too. A failed heat path
        # climbs at steady power; a power blip's reading jumps with it. The climb must be
        # held over two samples or more and total more than CLIMB_MIN_C, or be more than
        # ONE_SAMPLE_CLIMB_C in one (_climb): a slow drift's whole-degree reading steps are
        # no fast climb, at any scrape interval.
        unsure = c.peer_c_per_w * np.abs(power - plag)
        climb, climb_s, held = self._climb(s, judged, learned, slope, ts)
        far = hot & (excess > critical_c - HYSTERESIS_C * was_crit)
        rushing = ~far & held & (climb > CLIMB_MIN_C) \
            & (excess > RISE_SHARE * base + motion + unsure)
        crit = far | rushing
        hot |= crit
        # Reads low: against its peers, with no credit for running warm. A learned warm
        # offset allows a GPU to run hot; it is no promise that it must (a GPU whose heat
        # path was fixed, or whose offset was learned while a fault was already there,
        # reads like its peers again, and its sensor is fine).
        low_adj = np.where(fresh, temp - np.minimum(offset, 0.0), np.nan)
        low_median, low_count = peer_median(adj, below)
        low = fresh & warm & (low_count >= c.min_peers) & (
            low_adj - low_median < -np.maximum(c.sensor_low_c, margin))
        excess = np.where(low, low_adj - low_median, excess)
        quiet = ~hot & (~warm | (np.abs(excess) < margin))
        # The offset is how far the GPU's heat sink sits from its peers' at a steady power:
        # while it or its peers still heat or cool through a change of power, time
        # constants that differ by seconds part them by degrees that are not its own.
        quiet &= (moving <= STEADY_C) & (motion <= STEADY_C)
        self._learn(s[judged], (temp - median)[judged], plag[judged], dt[judged],
                    quiet[judged], usual[judged])
        step = np.clip(np.nan_to_num(dt), 0.0, MAX_STEP_S)
        t["warm"][s[judged]] += step[judged]
        t["warm_busy"][s[judged & busy]] += step[judged & busy]
        t["hot"][s[judged]] = hot[judged]
        t["crit"][s[judged]] = crit[judged]
        t["smooth"][s[judged]] = smooth[judged]
        t["rise_avg"][s[judged]] = rise_avg[judged]
        t["sts"][s[judged]] = ts[judged]
        t["drift"][s[judged]] = drift[judged]
        t["plag"][s[fresh]] = plag[fresh]
        t["tlag"][s[fresh]] = tlag[fresh]
        t["ts"][s[fresh]] = ts[fresh]
        if hot.any() or low.any():
            # The rise shown is the one that fired: the held climb's, for a fast climb.
            shown = np.where(rushing, slope, rise)
            peer_findings(self.c, b, rows, out, read, median, offset, excess, margin, shown,
                          plag, count, hot, crit, low, np.where(rushing, climb, np.nan),
                          climb_s, drift, scope)

    def _drift(self, s: np.ndarray, judged: np.ndarray, excess: np.ndarray,
               dt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A one-sided CUSUM of the excess over peer_drift_allow_c, in °C x minutes: a heat
        path that degrades slowly holds its GPU a little over its peers sample after sample,
        which whole-degree steps and phase transients (a sample or two) do not. Returns the
        sum (where not judged: as it was) and where it is past peer_drift_sum_c_min."""
        c, t = self.c, self.table
        old = t["drift"][s]
        if c.peer_drift_sum_c_min <= 0.0:
            return np.zeros_like(old), np.zeros_like(judged)
        step = np.clip(np.nan_to_num(dt, nan=0.0), 0.0, MAX_STEP_S) / 60.0
        grown = np.maximum(0.0, old + (excess - c.peer_drift_allow_c) * step)
        # Capped so that a GPU back among its peers clears within a few minutes.
        drift = np.where(judged, np.minimum(grown, 2.0 * c.peer_drift_sum_c_min), old)
        return drift, judged & (drift > c.peer_drift_sum_c_min)

    def _climb(self, s: np.ndarray, judged: np.ndarray, learned: np.ndarray,
               slope: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The excess's climb since the sample before its fast rise began, its span (s), and
        where that rise is held: at peer_rise_c_per_min or more on this sample and the one
        before it (or by more than ONE_SAMPLE_CLIMB_C in this one). One sample's step is no
        climb: at 5 s a +2 °C step of whole-degree readings reads 15 °C/min over
        peer_rise_window_s, and at 1 s, more."""
        c, t = self.c, self.table
        fast = judged & (slope >= c.peer_rise_c_per_min)
        began = fast & ~(t["fast"][s] > 0)
        run_from = np.where(began, t["last"][s], t["run_from"][s])
        run_ts = np.where(began, t["sts"][s], t["run_ts"][s])
        climb = np.where(fast, learned - run_from, np.nan)
        held = fast & np.isfinite(climb) & (~began | (climb > ONE_SAMPLE_CLIMB_C))
        t["fast"][s[judged]] = fast[judged]
        t["run_from"][s[judged]] = np.where(fast, run_from, np.nan)[judged]
        t["run_ts"][s[judged]] = np.where(fast, run_ts, np.nan)[judged]
        t["last"][s[judged]] = learned[judged]
        return np.where(held, climb, np.nan), ts - run_ts, held

    def _learn(self, s: np.ndarray, d: np.ndarray, p: np.ndarray, dt: np.ndarray,
               quiet: np.ndarray, prior: np.ndarray) -> None:
        """Learn the quiet samples' excess ``d`` at lagged power ``p`` into the offset's
        power bins (models/peer_offset.py): fast in a power range new to the GPU (its first
        warmup_s there, as in its first minutes), over peer_offset_forget_s afterwards;
        never from a sample in which it alarms. ``prior``: the offset at ``p`` now."""
        c, t = self.c, self.table
        s, d, p, dt, prior = s[quiet], d[quiet], p[quiet], dt[quiet], prior[quiet]
        step = np.clip(np.nan_to_num(dt, nan=0.0), 0.0, MAX_STEP_S)
        ev, m, pw = t["ow"][s], t["om"][s], t["op"][s]
        peer_offset.learn(ev, m, pw, d, p, step, ~np.isfinite(dt), prior,
                           c.peer_offset_forget_s, c.warmup_s,
                           peer_offset.SLOPE_SHARE * c.peer_c_per_w)
        t["ow"][s], t["om"][s], t["op"][s] = ev, m, pw

    def _offset(self, s: np.ndarray, p: np.ndarray) -> np.ndarray:
        """The GPU's usual deviation from its peers at power p (models/peer_offset.py)."""
        t = self.table
        return peer_offset.offset_at(t["ow"][s], t["om"][s], t["op"][s], p, self.c.warmup_s)

    def _unsure(self, s: np.ndarray, p: np.ndarray) -> np.ndarray:
        """How far the GPU's offset at power p may be off, its bin there still young."""
        t = self.table
        return peer_offset.unsure(t["ow"][s], t["op"][s], p, self.c.warmup_s,
                                  peer_offset.SLOPE_SHARE * self.c.peer_c_per_w)
