"""Rack cooling: many GPUs of one rack running hotter than their own thermal model at once.

A failing rack cooler (CRAH, rear-door heat exchanger, coolant loop) warms
every GPU of the rack together, so the node-peer comparison sees nothing and
a fixed limit sees it late, as sixteen separate GPU alerts. Each GPU carries a
first-order thermal model, temperature = a + r x lagged power (the die follows
power through a lag of tens of seconds), fitted by recursive least squares
that forgets over ``model_forget_s`` (it moves slowly where it has data, so
a fault at a familiar power is not learned away for hours). When at least
``rack_fraction`` of a rack's GPUs (and ``rack_min_gpus``, on two or more nodes) run
``rack_margin_c`` above their models, that is one rack finding. A processor
judges the racks from the nodes its partitions hold: it needs two or more
nodes of a rack to say anything about the rack.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.batch import COL, Batch, GpuTable, columns, ewma_weight

TEMP, POWER = COL["gpu_temp_c"], COL["gpu_power_w"]
P_SCALE = 100.0      # watts per unit of the model's power input (keeps its numbers near 1)
P0 = 100.0           # initial covariance: the first samples set the model
STALE_S = 120.0      # a GPU's residual counts for its rack this long after its last frame
NOMINAL_W = 300.0    # the power assumed for GPUs whose power is not reported
MAX_STEP_S = 60.0
SETTLE_TAUS = 3.0    # power steady over this many thermal time constants: settled
SETTLED_C = 1.0      # ... to within this many degrees of the model's prediction


class RackCooling:
    name = "rack_cooling"
    rules = {"rack_cooling": ("gpu_temp_c",)}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self.table = GpuTable(ts=np.nan, plag=np.nan, pslow=np.nan, a=np.nan, r=0.0, p11=P0,
                              p12=0.0, p22=P0, learned=0.0, resid=0.0, settled=0.0,
                              rts=np.nan, rack=-1.0)
        self._racks: dict[tuple[str, str], int] = {}
        self._names: list[tuple[str, str]] = []

    def drop(self, nodes: Iterable[str]) -> None:
        self.table.drop(nodes)

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        b = columns(frames)
        if not b.frames:
            return []
        slots = self.table.slots(b)
        codes = np.fromiter((self._rack_code(f) for f in b.frames), np.int64, len(b.frames))
        have = slots >= 0
        self.table["rack"][slots[have]] = np.broadcast_to(codes[:, None], slots.shape)[have]
        for rows in b.waves:
            self._wave(b, rows, slots[rows])
        return self._judge(b, codes)

    def _rack_code(self, f: Frame) -> int:
        key = (f.cluster, f.rack)
        code = self._racks.get(key)
        if code is None:
            code = self._racks[key] = len(self._names)
            self._names.append(key)
        return code

    def _wave(self, b: Batch, rows: np.ndarray, slots: np.ndarray) -> None:
        c, t = self.c, self.table
        x = b.x[rows]
        ts = np.broadcast_to(b.ts[rows][:, None], slots.shape)
        s = slots[slots >= 0]
        sel = slots >= 0
        temp, power, ts = x[..., TEMP][sel], x[..., POWER][sel], ts[sel]
        # Temperature-only series: a model of one nominal power is a slow baseline.
        power = np.where(np.isfinite(power), power, NOMINAL_W)
        dt = ts - t["ts"][s]
        ok = np.isfinite(temp) & np.isfinite(power) & ~b.lost[rows][sel] \
            & (temp >= c.sensor_min_c) & ~(dt <= 0)
        s, temp, power, ts, dt = s[ok], temp[ok], power[ok], ts[ok], dt[ok]
        known = np.isfinite(dt)
        prev = t["plag"][s]
        w = np.where(known, ewma_weight(np.nan_to_num(dt), c.thermal_tau_s), 1.0)
        plag = np.where(np.isnan(prev), power, prev + w * (power - prev))
        prev = t["pslow"][s]
        w = np.where(known, ewma_weight(np.nan_to_num(dt), SETTLE_TAUS * c.thermal_tau_s), 1.0)
        pslow = np.where(np.isnan(prev), power, prev + w * (power - prev))
        u = plag / P_SCALE
        a, r = t["a"][s], t["r"][s]
        a = np.where(np.isnan(a), temp - r * u, a)
        resid = temp - a - r * u
        warm = t["learned"][s] >= c.warmup_s
        t["a"][s] = a
        # Always learning, but recursive least squares moves slowly in directions it knows
        # (a fault at a familiar power takes hours to be absorbed) and fast in new ones.
        self._rls(s, u, resid, np.nan_to_num(dt))
        t["learned"][s] += np.clip(np.nan_to_num(dt), 0.0, MAX_STEP_S)
        t["resid"][s] = np.where(warm, resid, 0.0)
        # Settled: power steady for several time constants, so a residual is not a lag
        # mismatch after a job phase change (a whole rack ending a job cools together).
        t["settled"][s] = np.abs(plag - pslow) * np.maximum(r, 0.0) / P_SCALE < SETTLED_C
        t["pslow"][s] = pslow
        t["rts"][s] = ts
        t["plag"][s] = plag
        t["ts"][s] = ts

    def _rls(self, s: np.ndarray, u: np.ndarray, e: np.ndarray, dt: np.ndarray) -> None:
        """One recursive-least-squares step per GPU for theta = (a, r), input (1, u)."""
        t = self.table
        lam = np.exp(-np.clip(dt, 0.0, MAX_STEP_S) / self.c.model_forget_s)
        p11, p12, p22 = t["p11"][s], t["p12"][s], t["p22"][s]
        px1, px2 = p11 + p12 * u, p12 + p22 * u
        denom = lam + px1 + u * px2
        k1, k2 = px1 / denom, px2 / denom
        t["a"][s] = t["a"][s] + k1 * e
        t["r"][s] = t["r"][s] + k2 * e
        # P <- (P - k x'P) / lambda, bounded so a long flat load cannot blow it up.
        t["p11"][s] = np.minimum((p11 - k1 * px1) / lam, P0)
        t["p12"][s] = np.clip((p12 - k1 * px2) / lam, -P0, P0)
        t["p22"][s] = np.minimum((p22 - k2 * px2) / lam, P0)

    def _judge(self, b: Batch, codes: np.ndarray) -> list[Finding]:
        c, t = self.c, self.table
        n = t.used
        if n == 0:
            return []
        now = float(b.ts[-1])
        rack = t["rack"][:n].astype(np.int64)
        live = (rack >= 0) & (now - t["rts"][:n] <= STALE_S) & (t["learned"][:n] >= c.warmup_s) \
            & (t["settled"][:n] > 0)
        hot = live & (t["resid"][:n] > c.rack_margin_c)
        size = len(self._names)
        judged = np.bincount(rack[live], minlength=size)
        warm = np.bincount(rack[hot], minlength=size)
        out = []
        for code in np.unique(codes).tolist():
            total, many = int(judged[code]), int(warm[code])
            if total < c.rack_min_gpus or many < c.rack_fraction * total:
                continue
            members = np.flatnonzero(live & (rack == code))
            hot_nodes = {t.node_of[i] for i in members if hot[i]}
            if len(hot_nodes) < 2:
                continue  # one node's GPUs: that node's own cooling, not the rack's
            rise = float(np.median(t["resid"][members[hot[members]]]))
            cluster, name = self._names[code]
            ts = float(b.ts[np.flatnonzero(codes == code)[-1]])
            out.append(Finding(
                "rack_cooling", cluster, name, "", None, ts, rise,
                f"Rack {name}: {many} of {total} GPUs on {len(hot_nodes)} nodes run "
                f"{rise:.0f} °C above their usual temperature at their power",
                "critical", c.rack_for_s, 0.0,
                {"gpus_hot": many, "gpus_judged": total, "nodes_hot": len(hot_nodes),
                 "median_rise_c": round(rise, 2)},
                "Check the rack's cooling (CRAH or in-row unit, rear-door heat exchanger, "
                "coolant flow and inlet temperature); move jobs off the rack if it keeps rising",
                "rack"))
        return out
