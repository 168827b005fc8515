"""Thermal limits: what a GPU's own readings say, without peers (its throttle reasons:
``throttle``).

Limits come from the GPU itself where NVML reports them (the frame's
``gpu_slowdown_temp_c`` and ``gpu_shutdown_temp_c``: the temperatures at which
the driver slows the clocks and shuts the GPU down), else from the table of
parts (``fleetwatch/parts.py``: values read from real GPUs), else
from config. HBM has its own limit: NVIDIA documents 95 °C as the memory's
maximum operating temperature on A100 and H100 (``gpu_temp_max_mem_threshold``).
"""

from __future__ import annotations

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.batch import (
    COL,
    Batch,
    ewma_weight,
    flagged,
    gpu_finding,
    thermal_keep,
)
from fleetwatch.models.gpu_slots import GpuTable, WaveDetector
from fleetwatch.models.thermal_jump import (
    FIELDS,
    RISE_MIN_C,
    advance,
    beyond_peers,
    climb_past_power,
    lagged_power,
)
from fleetwatch.parts import thermal_limits_c

TEMP, MEM, SLOW, SHUT = COL["gpu_temp_c"], COL["gpu_mem_temp_c"], COL["gpu_slowdown_temp_c"], \
    COL["gpu_shutdown_temp_c"]
POWER, LIMIT = COL["gpu_power_w"], COL["gpu_power_limit_w"]
ENERGY = COL["gpu_energy_j"]
HYSTERESIS_C = 2.0
# Evidence of an alert judged against config's fallback limits, not the GPU's (1.0)
LIMITS_ASSUMED = "limits_assumed"
COOLING = "Check the GPU's cooling (fans, airflow, cold plate, coolant flow) and its neighbours"


class LimitTable:
    """Each GPU's (slowdown, shutdown) temperatures: NVML's where the frame gives them, else
    its model family's (``fleetwatch/parts.py``), else config's fallback."""

    def __init__(self, config: DetectorsConfig) -> None:
        self.c = config
        self._table: tuple[list[str], np.ndarray, np.ndarray, np.ndarray] | None = None

    def limits(self, b: Batch, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slowdown, shutdown) per GPU: NVML's where given, else the family's, else config."""
        slow, shut, _ = self.limits_and_assumed(b, rows)
        return slow, shut

    def limits_and_assumed(self, b: Batch, rows: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``limits``, and where the slowdown temperature is config's fallback (no NVML
        threshold, no part in ``parts.THERMAL_LIMITS_C``): an assumed limit, which the
        alerts must say is one."""
        slow, shut = b.x[rows, :, SLOW], b.x[rows, :, SHUT]
        need = (np.isnan(slow) | np.isnan(shut)) & b.present[rows]
        if not need.any():
            return slow, shut, np.zeros(slow.shape, bool)
        # Frames without NVML's thresholds (an older driver, a recorded series): every GPU
        # needs its family's, looked up once per model name, not once per GPU.
        fam_slow, fam_shut, fam_known = self._family_table(b.model_names)
        code = b.model[rows]
        at = np.where(code >= 0, code, 0)
        known = (code >= 0) & fam_known[at]
        fs = np.where(known, fam_slow[at], self.c.fallback_slowdown_c)
        fh = np.where(known, fam_shut[at], self.c.fallback_shutdown_c)
        assumed = need & np.isnan(slow) & ~known
        slow = np.where(need & np.isnan(slow), fs, slow)
        shut = np.where(need & np.isnan(shut), np.maximum(fh, slow), shut)
        return slow, shut, assumed

    def readable(self, b: Batch, rows: np.ndarray, temp: np.ndarray) -> np.ndarray:
        """Where the die reading is one a working GPU can give: from sensor_min_c up to
        sensor_over_shutdown_c over its shutdown temperature (a sensor stuck at 0 or at
        255 °C, 0xFF, is no temperature). NaN is not."""
        shut = self.limits(b, rows)[1]
        with np.errstate(invalid="ignore"):
            return (temp >= self.c.sensor_min_c) & (temp <= shut + self.c.sensor_over_shutdown_c)

    def _family_table(self, names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The family limits of every model name the batches have coded so far, and
        whether the table knows them."""
        table = self._table
        if table is None or table[0] is not names or len(table[1]) != len(names):
            known = [thermal_limits_c(name) for name in names]
            pairs = [k or (self.c.fallback_slowdown_c, self.c.fallback_shutdown_c)
                     for k in known]
            table = self._table = (names, np.array([p[0] for p in pairs], float),
                                   np.array([p[1] for p in pairs], float),
                                   np.array([k is not None for k in known], bool))
        return table[1], table[2], table[3]


class ThermalLimits(WaveDetector):
    """Die and memory temperature against the GPU's own limits; rate of rise; power limit."""

    name = "thermal_limits"
    rules = {
        "gpu_temp_critical": ("gpu_temp_c",),
        "gpu_temp_high": ("gpu_temp_c",),
        "gpu_mem_temp_critical": ("gpu_mem_temp_c",),
        "gpu_mem_temp_high": ("gpu_mem_temp_c",),
        "gpu_temp_rising": ("gpu_temp_c",),
        "gpu_warming_at_steady_power": ("gpu_temp_c", "gpu_power_w"),
        "gpu_temp_sensor_invalid": ("gpu_temp_c",),
        "gpu_power_over_limit": ("gpu_power_w", "gpu_power_limit_w"),
    }

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        # step: when the power last stepped up (gpu_temp_rising waits after it).
        self.table = GpuTable(ts=np.nan, smooth=np.nan, watts=np.nan, crit=0.0, high=0.0,
                              site=0.0, mcrit=0.0, mhigh=0.0, step=np.nan, plag=np.nan,
                              **FIELDS)
        self._limits = LimitTable(self.c)

    def limits(self, b: Batch, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slowdown, shutdown) per GPU: NVML's where given, else the family's, else config."""
        return self._limits.limits(b, rows)

    def _wave(self, b: Batch, rows: np.ndarray, slots: np.ndarray, out: list[Finding]) -> None:
        c, t = self.c, self.table
        x = b.x[rows]
        temp, mem = x[..., TEMP], x[..., MEM]
        slow, shut, assumed = self._limits.limits_and_assumed(b, rows)
        s = np.where(slots >= 0, slots, 0)
        ts = np.broadcast_to(b.ts[rows][:, None], temp.shape)
        ok = (slots >= 0) & np.isfinite(temp)
        with np.errstate(invalid="ignore"):
            invalid = ok & ((temp < c.sensor_min_c) | (temp > shut + c.sensor_over_shutdown_c))
            valid = ok & ~invalid
            crit = valid & (temp >= slow - HYSTERESIS_C * t["crit"][s])
            # high holds under crit too, so its alert does not flap as crit comes and goes.
            high = valid & (temp >= slow - c.high_margin_c - HYSTERESIS_C * t["high"][s])
            # The site's own limit (0: none), where it is below the one above.
            site = valid & ~high & (c.site_temp_limit_c > 0) & (
                temp >= c.site_temp_limit_c - HYSTERESIS_C * t["site"][s])
            mok = (slots >= 0) & np.isfinite(mem) & (mem >= c.sensor_min_c)
            mcrit = mok & (mem >= c.mem_max_c - HYSTERESIS_C * t["mcrit"][s])
            mhigh = mok & (mem >= c.mem_max_c - c.mem_margin_c - HYSTERESIS_C * t["mhigh"][s])
            # Rate of rise of the heat sink under the die: the die sits die_c_per_w x its
            # power above it within a second of any power change (models/peers.py), a step
            # that is no trend, so the sink reads as the die less that (at the last power
            # read, for a sample without one: a missing reading is no 17 °C step).
            dt = ts - t["ts"][s]
            power, limit = x[..., POWER], x[..., LIMIT]
            watts = np.where(np.isfinite(power), power, t["watts"][s])
            sink = np.where(np.isfinite(watts), temp - c.die_c_per_w * watts, temp)
            # From an average with time constant rise_window_s: for a ramp of slope a,
            # sink - average settles at a * dt * (1 - w) / w, so this undoes it.
            w = np.where(np.isfinite(dt) & (dt > 0), ewma_weight(dt, c.rise_window_s), 1.0)
            smooth = np.where(np.isnan(t["smooth"][s]), sink,
                              t["smooth"][s] + w * (sink - t["smooth"][s]))
            with np.errstate(divide="ignore"):
                slope = np.where(w < 1.0, (sink - smooth) * w
                                 / ((1.0 - w) * np.maximum(dt, 1e-9)), 0.0) * 60.0
            # Heading where? A heat sink approaching its level with time constant tau
            # climbs at (level - now) / tau, and the die stays its power's jump above it:
            # a GPU warming through a job start to a normal temperature climbs as fast as
            # one losing its cooling, but toward a level under its slowdown point (a real
            # H100: 23 s, collectors/sim/hardware.py). What is left of the approach comes
            # from how far the sink is ahead of its average (settling_left), not from the
            # slope: that is the rise averaged over the window, seconds old, which after a
            # power step overstates the climb still to come.
            heading = temp + settling_left(sink - smooth, dt, c.rise_window_s,
                                           c.thermal_tau_s)
            # Credible only when heading rise_margin_c past slowdown, and not within half a
            # time constant of a power step up (one that lifts the die by HYSTERESIS_C or
            # more at once): there a die that rises more per W than die_c_per_w reads as a
            # sink running ahead, and the projection overshoots by a few degrees (the climb
            # of every compute phase's start in a hot room, toward a level under slowdown).
            # No hold on the climb itself, and no longer wait: a cooler that stops under
            # full load takes a die from 68 to 90 °C in 20 s, and in a GPU idle when its
            # cooling failed the failure shows with the next compute phase's step.
            climbing = valid & ~crit & (temp >= slow - c.rise_band_c) & (
                slope >= c.rise_c_per_min) & (heading >= slow + c.rise_margin_c)
            stepped = np.isfinite(t["watts"][s]) & np.isfinite(power) & (
                c.die_c_per_w * (power - t["watts"][s]) >= HYSTERESIS_C)
            step = np.where(stepped, ts, t["step"][s])
            rising = climbing & ~(ts - step < 0.5 * c.thermal_tau_s)
            # A heat path failing at steady power (models/thermal_jump.py), judged at any
            # temperature: the sink's climb since a sample WINDOW_S or more ago, past what
            # the power's own rise explains.
            metered = np.isfinite(power)
            plag, before = lagged_power(t, s, dt, watts, x[..., ENERGY], c.thermal_tau_s)
            jump, explained, jump_s = climb_past_power(t, s, ts, sink, watts, c.thermal_tau_s)
            warming = valid & metered & ~(dt <= 0) & (beyond_peers(
                np.where(valid & metered, jump - explained, np.nan), watts) >= RISE_MIN_C)
            over = (slots >= 0) & (limit > 0) & (power > limit * c.power_over_limit_frac)
        fresh = valid & ~(dt <= 0)
        for name, mask in (("crit", crit), ("high", high), ("site", site), ("mcrit", mcrit),
                           ("mhigh", mhigh)):
            t[name][s[ok | mok]] = mask[ok | mok]
        t["step"][s[fresh]] = step[fresh]
        t["smooth"][s[fresh]] = smooth[fresh]
        t["watts"][s[fresh]] = watts[fresh]
        t["ts"][s[fresh]] = ts[fresh]
        kept = fresh & np.isfinite(watts)
        advance(t, s[kept], ts[kept], sink[kept], watts[kept], before[kept])
        t["plag"][s[fresh]] = plag[fresh]
        for i, j in flagged(warming):
            out.append(warming_finding(b.frames[rows[i]], j, float(temp[i, j]),
                                       float(jump[i, j]), float(explained[i, j]),
                                       float(jump_s[i, j]), float(watts[i, j]),
                                       thermal_keep(c.thermal_keep_firing_s)))
        self._emit(b, rows, out, temp, mem, slow, shut, slope, heading, power, limit,
                   assumed, invalid, crit, high, site, mcrit, mhigh, rising & fresh, over)

    def _emit(self, b: Batch, rows: np.ndarray, out: list[Finding], temp: np.ndarray,
              mem: np.ndarray, slow: np.ndarray, shut: np.ndarray, slope: np.ndarray,
              heading: np.ndarray, power: np.ndarray, limit: np.ndarray,
              *masks: np.ndarray) -> None:
        c = self.c
        keep = thermal_keep(c.thermal_keep_firing_s)
        assumed, invalid, crit, high, site, mcrit, mhigh, rising, over = masks
        for i, j in flagged(invalid | crit | high | site | mcrit | mhigh | rising | over):
            f = b.frames[rows[i]]
            g = f.gpus[j].index
            tc, sl, sh = temp[i, j], slow[i, j], shut[i, j]
            lim = {"temp_c": tc, "slowdown_c": sl, "shutdown_c": sh}
            its, why = "its", ""
            if assumed[i, j]:  # config's fallback, not the GPU's: say so
                lim[LIMITS_ASSUMED] = 1.0
                its, why = "its assumed", assumed_text(f.gpus[j].model)
            where = f"GPU {g} on {f.node}"
            if invalid[i, j]:
                out.append(gpu_finding(
                    f, g, "gpu_temp_sensor_invalid", tc,
                    f"{where} reads {tc:.0f} °C, which a working GPU cannot (shutdown at "
                    f"{sh:.0f} °C{', assumed' if why else ''}){why}", "warning", 0.0, lim,
                    "The temperature sensor or its reading is failing: the GPU is not "
                    "protected by its thermal alerts; reset the GPU or service it"))
            if crit[i, j]:
                out.append(gpu_finding(
                    f, g, "gpu_temp_critical", tc, f"{where} at {tc:.0f} °C, "
                    + critical_text(float(tc), float(sl), float(sh), its) + why, "critical",
                    0.0,
                    {**lim, **keep}, COOLING + "; drain the node if it does not cool down"))
            if high[i, j]:
                out.append(gpu_finding(
                    f, g, "gpu_temp_high", tc,
                    f"{where} at {tc:.0f} °C, "
                    + (f"{sl - tc:.0f} °C below" if tc < sl else "at or above")
                    + f" {its} slowdown temperature {sl:.0f} °C{why}", "warning", c.high_for_s,
                    {**lim, **keep}, COOLING))
            elif site[i, j]:
                lc = c.site_temp_limit_c
                out.append(gpu_finding(
                    f, g, "gpu_temp_high", tc,
                    f"{where} at {tc:.0f} °C, "
                    + ("at or above" if tc >= lc else f"{lc - tc:.0f} °C below (held until "
                       f"more than {HYSTERESIS_C:.0f} °C under)")
                    + f" the site's limit {lc:g} °C (detectors.site_temp_limit_c); {its} "
                    f"slowdown temperature is {sl:.0f} °C{why}", "warning", c.site_temp_for_s,
                    {**lim, "site_limit_c": lc, **keep}, COOLING))
            for rule, mask, severity, for_s in (
                    ("gpu_mem_temp_high", mhigh, "warning", c.mem_high_for_s),
                    ("gpu_mem_temp_critical", mcrit, "critical", 0.0)):
                if mask[i, j]:
                    out.append(gpu_finding(
                        f, g, rule, mem[i, j], f"{where}: memory (HBM) at {mem[i, j]:.0f} °C, "
                        f"limit {c.mem_max_c:.0f} °C", severity, for_s,
                        {"mem_temp_c": mem[i, j], "mem_max_c": c.mem_max_c, **keep},
                        COOLING + "; hot HBM raises the ECC error rate"))
            if rising[i, j]:
                out.append(gpu_finding(
                    f, g, "gpu_temp_rising", slope[i, j],
                    f"{where} climbing {slope[i, j]:.0f} °C/min at {tc:.0f} °C, heading for "
                    f"{heading[i, j]:.0f} °C, past {its} slowdown temperature {sl:.0f} °C{why}",
                    "warning", 0.0,
                    {**lim, "rise_c_per_min": slope[i, j], "heading_c": heading[i, j]},
                    COOLING))
            if over[i, j]:
                out.append(gpu_finding(
                    f, g, "gpu_power_over_limit", power[i, j],
                    f"{where} draws {power[i, j]:.0f} W, above its enforced limit "
                    f"{limit[i, j]:.0f} W", "warning", c.power_over_for_s,
                    {"power_w": power[i, j], "power_limit_w": limit[i, j]},
                    "Check the power limit settings and the board's power sensor; "
                    "service the GPU if it persists"))


def warming_finding(f: Frame, j: int, temp: float, climb: float, explained: float,
                    span: float, watts: float, keep: dict[str, float]) -> Finding:
    """gpu_warming_at_steady_power: a heat path that just failed (models/thermal_jump.py)."""
    g = f.gpus[j].index
    return gpu_finding(
        f, g, "gpu_warming_at_steady_power", climb - explained,
        f"GPU {g} on {f.node} at {temp:.0f} °C warmed {climb:.0f} °C in {span:.0f} s at "
        f"{watts:.0f} W, {climb - explained:.0f} °C more than its power's changes explain: "
        "its cooling stopped working (a healthy GPU warms as its power rises, not at "
        "steady power)", "critical", 0.0,
        {"temp_c": temp, "climb_c": climb, "explained_c": explained, "climb_s": span,
         "power_w": watts, **keep},
        COOLING + "; drain the node if it keeps climbing")


def settling_left(lead: np.ndarray, dt: np.ndarray, window_s: float,
                  tau_s: float) -> np.ndarray:
    """How much further a first-order approach with time constant tau_s still climbs, from
    ``lead``: how far the reading is ahead of its exponential average over window_s, the
    samples dt seconds apart.

    For x_k = L - A q^k (q = exp(-dt / tau)) averaged with weight w per sample, the lead
    settles at A q^k (1 - w)(1 - q) / (q - 1 + w), so what is left, L - x_k = A q^k, is the
    lead times (q - 1 + w) / ((1 - w)(1 - q)): about tau / window - 1 of it for short
    samples. A window as long as tau cannot tell an approach from a ramp: there the ramp's
    rate over tau is taken (what the rule took before).
    """
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        q = np.exp(-np.clip(dt, 0.0, None) / tau_s)
        w = ewma_weight(dt, window_s)
        approach = lead * (q - 1.0 + w) / ((1.0 - w) * (1.0 - q))
        ramp = lead * w / ((1.0 - w) * np.maximum(dt, 1e-9)) * tau_s
        left = np.where(q - 1.0 + w > 0.0, approach, ramp)
    return np.where(np.isfinite(left) & (w < 1.0) & (dt > 0), left, 0.0)


def critical_text(temp: float, slow: float, shut: float, its: str = "its") -> str:
    """Where a critical GPU stands against its limits: past its shutdown temperature when
    it is (it should have shut down), else against its slowdown temperature, also while held
    just below it by the hysteresis. ``its``: "its assumed" for config's fallback limits."""
    if temp >= shut:
        return (f"{temp - shut:.0f} °C above" if temp - shut >= 0.5 else "at") + (
            f" {its} shutdown temperature {shut:.0f} °C (slowdown {slow:.0f} °C)")
    return ("at or above" if temp >= slow else
            (f"{slow - temp:.0f} °C" if slow - temp >= 0.5 else "just") +
            f" below (held until more than {HYSTERESIS_C:.0f} °C under)") + (
        f" {its} slowdown temperature {slow:.0f} °C (shutdown {shut:.0f} °C)")


def assumed_text(model: str) -> str:
    """What an alert judged against config's fallback limits adds to its message."""
    part = f"fleetwatch knows none for {model}" if model else "the GPU names no model"
    return ("; assumed: NVML gave no thermal thresholds and " + part
            + " (detectors.fallback_slowdown_c, fallback_shutdown_c)")
