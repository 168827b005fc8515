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
nodes of a rack to say anything about the rack. Most GPUs of one node above
their models, where the rack's others are not, is that node's cooling (its
fans, its intake): one node finding (``node_cooling``), not eight GPU alerts.

Where the nodes report their inlet air (``host_inlet_temp_c``, the BMC's
sensor), a failing cooler shows there first, before the dies follow through
their thermal lag: each node's inlet is compared with its own average over
``INLET_BASE_S``. When at least ``rack_fraction`` of a rack's nodes (and two or
more) read ``rack_inlet_rise_c`` above their average, that too is the rack
finding. The average lags a steady drift by the drift's rate times
``INLET_BASE_S``: a room that warms by 6 °C an hour reads 1 °C above it, a
rack whose cooler stops warms by degrees a minute. A whole room warming
that fast (a chiller trip) makes every rack's finding, as it should.
"""

from __future__ import annotations

import math
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
NODE_WARMUP = 3.0    # node findings: models learned this many warm-ups (see _nodes)
SETTLE_TAUS = 3.0    # power steady over this many thermal time constants: settled
SETTLED_C = 1.0      # ... to within this many degrees of the model's prediction
INLET_BASE_S = 600.0  # a node's usual inlet air: its average over this time constant
INLET_MIN_C, INLET_MAX_C = -40.0, 100.0  # the catalogue's range for host_inlet_temp_c


class RackCooling:
    name = "rack_cooling"
    rules = {"rack_cooling": ("gpu_temp_c",), "node_cooling": ("gpu_temp_c",)}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self.table = GpuTable(ts=np.nan, plag=np.nan, pslow=np.nan, a=np.nan, r=0.0, p11=P0,
                              p12=0.0, p22=P0, learned=0.0, resid=0.0, settled=0.0,
                              steady=np.nan, rts=np.nan, rack=-1.0)
        self._racks: dict[tuple[str, str], int] = {}
        self._names: list[tuple[str, str]] = []
        self.inlets = Inlets()

    def drop(self, nodes: Iterable[str]) -> None:
        self.table.drop(nodes)
        self.inlets.drop(nodes)

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
        self.inlets.update(b.frames, codes.tolist())
        return self._judge(b, codes, slots)

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
        # The fast and slow averages agree when power is steady, but also for the one
        # sample in which the fast one falls through the slow one (a busy phase that
        # ends a minute or two after it began): so they must have agreed for a time
        # constant, not just now.
        steady = np.abs(plag - pslow) * np.maximum(r, 0.0) / P_SCALE < SETTLED_C
        since = np.where(steady, np.fmin(t["steady"][s], ts), np.nan)
        t["steady"][s] = since
        t["settled"][s] = steady & (ts - since >= c.thermal_tau_s)
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
        # P <- (P - k x'P) / lambda, bounded so a long flat load cannot blow it up: the
        # whole matrix is scaled down (bounding its entries one by one would let it stop
        # being positive definite, and the fit then runs away along the direction that
        # a flat load never excites).
        p11, p12, p22 = (p11 - k1 * px1) / lam, (p12 - k1 * px2) / lam, (p22 - k2 * px2) / lam
        shrink = np.minimum(1.0, P0 / np.maximum(np.maximum(p11, p22), 1e-12))
        t["p11"][s], t["p12"][s], t["p22"][s] = p11 * shrink, p12 * shrink, p22 * shrink

    def _judge(self, b: Batch, codes: np.ndarray, slots: np.ndarray) -> list[Finding]:
        c, t = self.c, self.table
        n = t.used
        now = float(b.ts[-1])
        rack = t["rack"][:n].astype(np.int64)
        live = (rack >= 0) & (now - t["rts"][:n] <= STALE_S) & (t["learned"][:n] >= c.warmup_s) \
            & (t["settled"][:n] > 0)
        hot = live & (t["resid"][:n] > c.rack_margin_c)
        size = len(self._names)
        judged = np.bincount(rack[live], minlength=size)
        warm = np.bincount(rack[hot], minlength=size)
        inlets = self.inlets.judge(now, c.rack_inlet_rise_c, c.warmup_s)
        out = []
        # Only the racks this batch speaks for that have many GPUs warm or inlets rising.
        many_warm = (judged >= c.rack_min_gpus) & (warm >= c.rack_fraction * judged)
        rising_inlet = {code for code, (rising, nodes, _) in inlets.items()
                        if rising >= max(2, c.rack_fraction * nodes)}
        for code in np.unique(codes).tolist():
            if not (many_warm[code] or code in rising_inlet):
                continue
            said, evidence, value = [], {}, 0.0
            total, many = int(judged[code]), int(warm[code])
            if total >= c.rack_min_gpus and many >= c.rack_fraction * total:
                members = np.flatnonzero(live & (rack == code))
                hot_nodes = {t.node_of[i] for i in members if hot[i]}
                if len(hot_nodes) >= 2:  # one node's GPUs: its own cooling, not the rack's
                    value = float(np.median(t["resid"][members[hot[members]]]))
                    said.append(f"{many} of {total} GPUs on {len(hot_nodes)} nodes run "
                                f"{value:.0f} °C above their usual temperature at their power")
                    evidence = {"gpus_hot": many, "gpus_judged": total,
                                "nodes_hot": len(hot_nodes), "median_rise_c": round(value, 2)}
            rising, nodes, air = inlets.get(code, (0, 0, 0.0))
            if rising >= max(2, c.rack_fraction * nodes):
                said.append(f"the inlet air of {rising} of {nodes} nodes is {air:.1f} °C above "
                            "its ten-minute average")
                evidence |= {"nodes_inlet_warm": rising, "nodes_inlet_judged": nodes,
                             "median_inlet_rise_c": round(air, 2)}
                value = value or air
            if not said:
                continue
            cluster, name = self._names[code]
            ts = float(b.ts[np.flatnonzero(codes == code)[-1]])
            out.append(Finding(
                "rack_cooling", cluster, name, "", None, ts, value,
                f"Rack {name}: {'; '.join(said)}", "critical", c.rack_for_s, 0.0, evidence,
                "Check the rack's cooling (CRAH or in-row unit, rear-door heat exchanger, "
                "coolant flow and inlet temperature); move jobs off the rack if it keeps rising",
                "rack"))
        return out + self._nodes(b, slots, live, hot, {f.rack for f in out})

    def _nodes(self, b: Batch, slots: np.ndarray, live: np.ndarray, hot: np.ndarray,
               racks: set[str]) -> list[Finding]:
        """Node findings: most GPUs of one node above their models (its fans, its air),
        where its rack as a whole is not (a rack finding covers its nodes)."""
        c, t = self.c, self.table
        have = slots >= 0
        s = np.where(have, slots, 0)
        # A node's few GPUs are a smaller sample than a rack's: only models that have
        # learned NODE_WARMUP times as long, over at least half of the node's GPUs (a
        # model fresh from its warm-up can be degrees off at a power it has not seen).
        ready = live & (t["learned"][:len(live)] >= NODE_WARMUP * c.warmup_s)
        judged = (ready[s] & have).sum(axis=1)
        many = (hot[s] & ready[s] & have).sum(axis=1)
        found = (judged >= 2) & (2 * judged >= have.sum(axis=1)) & (many >= 2) \
            & (many >= c.rack_fraction * judged)
        out: dict[tuple[str, str], Finding] = {}
        for row in np.flatnonzero(found).tolist():  # the last frame of a node counts
            f = b.frames[row]
            if f.rack in racks:
                continue
            mine = s[row][have[row] & hot[s[row]] & ready[s[row]]]
            rise = float(np.median(t["resid"][mine]))
            out[(f.cluster, f.node)] = Finding(
                "node_cooling", f.cluster, f.rack, f.node, None, f.ts, rise,
                f"{f.node}: {int(many[row])} of {int(judged[row])} GPUs run {rise:.0f} °C "
                "above their usual temperature at their power, together", "critical",
                c.rack_for_s, 0.0, {"gpus_hot": int(many[row]), "gpus_judged": int(judged[row]),
                                    "median_rise_c": round(rise, 2)},
                "Check the node's fans and airflow (fan faults in the BMC log, blanking "
                "panels, cables blocking the intake) and its inlet air; drain it if it "
                "keeps rising", "node")
        return list(out.values())


class Inlets:
    """Each node's inlet air against its own average over ``INLET_BASE_S``."""

    def __init__(self) -> None:
        # (cluster, node) -> [average, ts, rise, seconds seen, rack code]
        self.state: dict[tuple[str, str], list[float]] = {}

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self.state if k[1] in gone]:
            del self.state[key]

    def update(self, frames: Sequence[Frame], codes: Sequence[int]) -> None:
        for f, code in zip(frames, codes):
            v = f.host.metrics.get("host_inlet_temp_c")
            if v is None or not INLET_MIN_C <= v <= INLET_MAX_C:  # NaN fails both
                continue
            key = (f.cluster, f.node)
            s = self.state.get(key)
            dt = math.inf if s is None else f.ts - s[1]
            if dt <= 0:
                continue  # a repeated or older frame
            if dt > STALE_S:  # first reading, or back after a gap: a new average
                self.state[key] = [v, f.ts, 0.0, 0.0, code]
                continue
            assert s is not None
            s[2] = v - s[0]
            s[0] += -math.expm1(-dt / INLET_BASE_S) * (v - s[0])
            s[1], s[4] = f.ts, code
            s[3] += min(dt, MAX_STEP_S)

    def judge(self, now: float, rise_c: float, warmup_s: float
              ) -> dict[int, tuple[int, int, float]]:
        """Per rack code: (nodes whose inlet reads ``rise_c`` above its average, nodes
        judged, the median rise of the warm ones)."""
        by_rack: dict[int, list[float]] = {}
        for s in self.state.values():
            if now - s[1] <= STALE_S and s[3] >= warmup_s:
                by_rack.setdefault(int(s[4]), []).append(s[2])
        out: dict[int, tuple[int, int, float]] = {}
        for code, rises in by_rack.items():
            warm = [r for r in rises if r >= rise_c]
            out[code] = (len(warm), len(rises), float(np.median(warm)) if warm else 0.0)
        return out
