"""Each GPU's thermal model for the rack detector (``models.rack``): learned, averaged, and
read as a rise over the model.

Temperature = a + r x lagged power + d x power, fitted per GPU by recursive least
squares that forgets over ``model_forget_s``; its residual is judged at once where power
has been steady for a few time constants, and otherwise averaged over ``AVERAGE_TAUS``
time constants. The rack and node judgements built on these rises live in
``models.rack``; this module holds no finding.
"""

from __future__ import annotations

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.batch import COL, Batch, ewma_weight
from fleetwatch.models.gpu_slots import GpuTable
from fleetwatch.models.thermal import LimitTable

TEMP, POWER = COL["gpu_temp_c"], COL["gpu_power_w"]
P_SCALE = 100.0      # watts per unit of the model's power inputs (keeps its numbers near 1)
P0 = 100.0           # initial covariance: the first samples set the model
STALE_S = 120.0      # a GPU's residual counts for its rack this long after its last frame
MAX_STEP_S = 60.0
SETTLE_TAUS = 3.0    # power steady over this many thermal time constants: settled
SETTLED_C = 1.0      # ... to within this many degrees of the model's prediction
AVERAGE_TAUS = 10.0  # unsettled GPUs: residuals averaged over this many time constants
KNOWN_Q = 0.1        # a power the model knows: its prediction weighs 1/KNOWN_Q samples there


class GpuModels:
    """The models of every GPU a rack detector has seen, one row of ``table`` each (its
    ``rack`` and ``node`` codes are the detector's, written by it)."""

    def __init__(self, config: DetectorsConfig) -> None:
        self.c = config
        # The model's parameters (a, r, d), its covariance (p11 .. p33, symmetric), and
        # the residual's average (m / norm, over mean_s seconds; NaN: not started).
        self.table = GpuTable(ts=np.nan, plag=np.nan, pslow=np.nan, a=np.nan, r=0.0, d=0.0,
                              p11=P0, p12=0.0, p13=0.0, p22=P0, p23=0.0, p33=P0,
                              learned=0.0, resid=0.0, settled=0.0, steady=np.nan,
                              m=0.0, norm=0.0, mean_s=np.nan, mts=np.nan, q=np.inf,
                              rts=np.nan, rack=-1.0, node=-1.0)
        self.limits = LimitTable(config)

    def wave(self, b: Batch, rows: np.ndarray, slots: np.ndarray, frozen: np.ndarray,
             room: np.ndarray) -> None:
        """One wave of a batch (one frame per GPU at most): judge each GPU's sample against
        its model and learn from it, but where ``frozen`` (its rack's or node's finding
        holds); ``room`` is each frame's room shift, taken out of its temperature."""
        c, t = self.c, self.table
        x = b.x[rows]
        sel = slots >= 0
        ts = np.broadcast_to(b.ts[rows][:, None], slots.shape)[sel]
        hold = np.broadcast_to(frozen[:, None], slots.shape)[sel]
        s = slots[sel]
        temp, power = x[..., TEMP][sel], x[..., POWER][sel]
        # The room's share taken out (``rack_room.RoomShift``); readable is judged on
        # the raw one.
        temp = temp - np.broadcast_to(room[:, None], slots.shape)[sel]
        dt = ts - t["ts"][s]
        # A GPU without a power reading is not judged: no model of its power can tell a
        # rising load from a cooling loss. Nor is a reading no working GPU gives (0, or a
        # sensor stuck at 255 °C): it is neither judged nor learned.
        ok = np.isfinite(temp) & np.isfinite(power) & ~b.lost[rows][sel] \
            & self.limits.readable(b, rows, x[..., TEMP])[sel] & ~(dt <= 0)
        s, temp, power, ts, dt, hold = s[ok], temp[ok], power[ok], ts[ok], dt[ok], hold[ok]
        known = np.isfinite(dt)
        step = np.nan_to_num(dt)
        prev = t["plag"][s]
        w = np.where(known, ewma_weight(step, c.thermal_tau_s), 1.0)
        plag = np.where(np.isnan(prev), power, prev + w * (power - prev))
        prev = t["pslow"][s]
        w = np.where(known, ewma_weight(step, SETTLE_TAUS * c.thermal_tau_s), 1.0)
        pslow = np.where(np.isnan(prev), power, prev + w * (power - prev))
        u, v = plag / P_SCALE, power / P_SCALE
        a, r, d = t["a"][s], t["r"][s], t["d"][s]
        a = np.where(np.isnan(a), temp - r * u - d * v, a)
        resid = temp - a - r * u - d * v
        # The model's own doubt about its prediction at this power (x'Px: 1/the samples'
        # worth it has there). A power it has not learned (the first busy minutes after an
        # idle history) is not judged: any temperature there would read as a fault.
        q = self._doubt(s, u, v)
        warm = (t["learned"][s] >= c.warmup_s) & (q <= KNOWN_Q)
        t["q"][s] = q
        t["a"][s] = a
        # Learning all the time but while its rack's or node's finding holds; recursive
        # least squares moves slowly in directions it knows (a fault at a familiar power
        # takes hours to be absorbed) and fast in new ones.
        learn = ~hold
        self._rls(s[learn], u[learn], v[learn], resid[learn], step[learn])
        t["learned"][s[learn]] += np.clip(step[learn], 0.0, MAX_STEP_S)
        t["resid"][s] = np.where(warm, resid, 0.0)
        self._average(s, ts, resid, step, warm)
        # Settled: power steady for several time constants, so a residual is not a lag
        # mismatch after a job phase change (a whole rack ending a job cools together).
        # The fast and slow averages agree when power is steady, but also for the one
        # sample in which the fast one falls through the slow one (a busy phase that
        # ends a minute or two after it began): so they must have agreed for a time
        # constant, not just now.
        steady = np.abs(plag - pslow) * np.maximum(t["r"][s], 0.0) / P_SCALE < SETTLED_C
        since = np.where(steady, np.fmin(t["steady"][s], ts), np.nan)
        t["steady"][s] = since
        t["settled"][s] = steady & (ts - since >= c.thermal_tau_s)
        t["pslow"][s] = pslow
        t["rts"][s] = ts
        t["plag"][s] = plag
        t["ts"][s] = ts

    def _doubt(self, s: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """x'Px for x = (1, u, v): the variance of the model's prediction, in samples."""
        t = self.table
        return (t["p11"][s] + 2.0 * t["p12"][s] * u + 2.0 * t["p13"][s] * v
                + t["p22"][s] * u * u + 2.0 * t["p23"][s] * u * v + t["p33"][s] * v * v)

    def _average(self, s: np.ndarray, ts: np.ndarray, resid: np.ndarray, step: np.ndarray,
                 warm: np.ndarray) -> None:
        """The residual's average over ``AVERAGE_TAUS`` time constants, each sample weighed
        by its interval (``m / norm``: no weight on where it started), of the samples at
        powers the model knows. It starts again once its own time constant has passed
        without such a sample (a gap, or a job at powers its model does not know: what it
        held then is not the GPU's state now), and while the model is not warm yet."""
        t = self.table
        span = AVERAGE_TAUS * self.c.thermal_tau_s
        going = np.isfinite(t["mean_s"][s]) & (ts - t["mts"][s] <= span)
        m, norm = np.where(going, t["m"][s], 0.0), np.where(going, t["norm"][s], 0.0)
        w = np.where(going & warm, ewma_weight(step, span), 0.0)
        t["m"][s] = m + w * (resid - m)
        t["norm"][s] = norm + w * (1.0 - norm)
        seen = np.where(going, t["mean_s"][s], 0.0) + np.where(
            going & warm, np.clip(step, 0.0, MAX_STEP_S), 0.0)
        t["mean_s"][s] = np.where(warm | going, seen, np.nan)
        t["mts"][s] = np.where(warm, ts, t["mts"][s])

    def _rls(self, s: np.ndarray, u: np.ndarray, v: np.ndarray, e: np.ndarray,
             dt: np.ndarray) -> None:
        """One recursive-least-squares step per GPU for theta = (a, r, d), input (1, u, v)."""
        t = self.table
        lam = np.exp(-np.clip(dt, 0.0, MAX_STEP_S) / self.c.model_forget_s)
        p11, p12, p13 = t["p11"][s], t["p12"][s], t["p13"][s]
        p22, p23, p33 = t["p22"][s], t["p23"][s], t["p33"][s]
        px1, px2, px3 = p11 + p12 * u + p13 * v, p12 + p22 * u + p23 * v, p13 + p23 * u + p33 * v
        denom = lam + px1 + u * px2 + v * px3
        k1, k2, k3 = px1 / denom, px2 / denom, px3 / denom
        t["a"][s] = t["a"][s] + k1 * e
        t["r"][s] = t["r"][s] + k2 * e
        t["d"][s] = t["d"][s] + k3 * e
        # P <- (P - k x'P) / lambda, bounded so a long flat load cannot blow it up: the
        # whole matrix is scaled down (bounding its entries one by one would let it stop
        # being positive definite, and the fit then runs away along the direction that
        # a flat load never excites).
        p11, p12, p13 = (p11 - k1 * px1) / lam, (p12 - k1 * px2) / lam, (p13 - k1 * px3) / lam
        p22, p23, p33 = (p22 - k2 * px2) / lam, (p23 - k2 * px3) / lam, (p33 - k3 * px3) / lam
        shrink = np.minimum(1.0, P0 / np.maximum(np.maximum(np.maximum(p11, p22), p33), 1e-12))
        t["p11"][s], t["p12"][s], t["p13"][s] = p11 * shrink, p12 * shrink, p13 * shrink
        t["p22"][s], t["p23"][s], t["p33"][s] = p22 * shrink, p23 * shrink, p33 * shrink

    def rise(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Each GPU's rise over its model, NaN where it is not judged: its residual where it
        is settled, else its residual's average once that has a time constant's worth of
        samples; and that average alone (NaN where it has not)."""
        c, t = self.c, self.table
        n = t.used
        # Judged at its latest sample's power, which its model must know (an average that
        # stood still while the GPU ran at powers its model does not know is stale).
        fresh = (t["rack"][:n] >= 0) & (now - t["rts"][:n] <= STALE_S) \
            & (t["learned"][:n] >= c.warmup_s) & (t["q"][:n] <= KNOWN_Q)
        # A sample's own residual only once the model has judged its average too: fresh
        # from its warm-up, a model has not yet learned the lag (the die's part comes
        # first), so a load swinging faster than its averages (30 s compute, 30 s
        # all-reduce; power recorded as each sample's mean) reads as settled on a model
        # that cannot yet tell its phases apart.
        ready = t["mean_s"][:n] >= AVERAGE_TAUS * c.thermal_tau_s
        settled = np.where((t["settled"][:n] > 0) & ready, t["resid"][:n], np.nan)
        averaged = np.where(ready, t["m"][:n] / np.maximum(t["norm"][:n], 1e-9), np.nan)
        averaged = np.where(fresh, averaged, np.nan)
        return np.where(fresh & np.isfinite(settled), settled, averaged), averaged
