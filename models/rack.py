"""Rack cooling: many GPUs of one rack running hotter than their own thermal model at once.

A failing rack cooler (CRAH, rear-door heat exchanger, coolant loop) warms
every GPU of the rack together, so the node-peer comparison sees nothing and
a fixed limit sees it late, as sixteen separate GPU alerts. Each GPU carries a
first-order thermal model: its die sits ``d`` x power above a heat sink that
follows power through the time constant ``thermal_tau_s``, so temperature =
a + r x lagged power + d x power, fitted by recursive least squares that forgets
over ``model_forget_s`` (it moves slowly where it has data, so a fault at a
familiar power is not learned away for hours). A GPU is judged on its residual
(temperature less the model's) where its power has been steady for a few time
constants, at once, and otherwise on its residual averaged over
``AVERAGE_TAUS`` time constants: under a load whose power changes every few
seconds (an LLM's compute, all-reduce and input phases) each sample's residual
carries the power the samples missed, but a cooling loss raises every sample's,
whatever the phase. When at least ``rack_fraction`` of a rack's GPUs (and
``rack_min_gpus``, on two or more nodes) run ``rack_margin_c`` above their
models, that is one rack finding. A processor judges the racks from the nodes
its partitions hold: it needs two or more nodes of a rack to say anything about
the rack. Most GPUs of one node above their models and above the rest of its
rack is that node's cooling (its fans, its intake): one node finding
(``node_cooling``), not eight GPU alerts; never while its rack's finding holds.

A GPU whose power is not reported has no model to be judged against (a rising
load would read as a cooling loss): it is left out, and counted as not judged
in ``coverage()``. Its rack is still judged by its nodes' inlet air.

Where the nodes report their inlet air (``host_inlet_temp_c``, the BMC's
sensor), a failing cooler shows there first, before the dies follow through
their thermal lag: each node's inlet is compared with its own average over
``rack_inlets.INLET_BASE_S``. When at least ``rack_fraction`` of a rack's nodes (and two or
more) read ``rack_inlet_rise_c`` above their average, that too is the rack
finding. The average lags a steady drift by the drift's rate times
``INLET_BASE_S``: a room that warms by 6 °C an hour reads 1 °C above it, a
rack whose cooler stops warms by degrees a minute.

A rise the other racks share (the room, the facility's water, the weather: every
rack's GPUs above their models, every node's inlet above its average) is not one
rack's cooler: where the median rise of the other racks whose finding does not hold
(``rack_inlets.others_median``; a flagged rack's rise is its own cooler's; at least three
such racks, or the room and their coolers cannot be told apart) is
more than ``CLEAR`` of the line, a rack is judged on its rise beyond the part of it
above ``CLEAR`` of the line, on its GPUs' models and on its inlet air alike: a whole
fleet warming together raises no rack's finding, while the room's daily swing and the
others' usual spread around their models do not delay one rack's. The room's own move
is taken out of every temperature before the models see it (``rack_room.RoomShift``).

A baseline never learns from the anomaly it is judging: while a rack's finding
holds, its GPUs' models and its nodes' inlet averages stand still (as a node's
GPUs' models do while its node finding holds), for at most ``model_forget_s``
(a rack that stays so long is its new normal). A finding holds until its rise
falls under ``CLEAR`` of the line that raised it, so a rack hovering at the
line is one alert, not one per crossing. A held rack's inlet air is judged against the
other, unflagged racks' air now and its usual place among them (``Inlets.judge``), not
against its own average that stood still: the room's drift while the rack was flagged
(its daily swing, a warm spell) is not the rack's, and a rack whose cooler is fixed clears
within minutes rather than hours, while it would mute new GPU alerts in the rack.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import Finding, OpenAlert
from fleetwatch.models.batch import Batch, columns
from fleetwatch.models.node_cooling import node_findings
from fleetwatch.models.rack_inlets import Inlets, others_median
from fleetwatch.models.rack_models import MAX_STEP_S, STALE_S, GpuModels
from fleetwatch.models.rack_room import RoomShift

CLEAR = 0.5          # a finding holds until its rise is under this share of its line
RULES = ("rack_cooling", "node_cooling")


class RackCooling:
    name = "rack_cooling"
    rules = {"rack_cooling": ("gpu_temp_c",), "node_cooling": ("gpu_temp_c",)}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self.models = GpuModels(self.c)
        self.table = self.models.table
        self._racks: dict[tuple[str, str], int] = {}
        self._names: list[tuple[str, str]] = []
        # (cluster, node) -> its code in the table's node column; codes are never reused
        # (a node dropped keeps its code in rows not yet aged out), so ``_node_next`` counts.
        self._node_codes: dict[tuple[str, str], int] = {}
        self._node_next = 0
        # Rack codes and (cluster, node) whose finding holds -> since when.
        self._flagged: dict[int, float] = {}
        self._cleared: dict[int, float] = {}  # rack code -> when its finding last ended
        self._flagged_nodes: dict[tuple[str, str], float] = {}
        # Rack codes whose baselines stand still now: flagged, for at most model_forget_s
        # (a rack that stays so long is its new normal).
        self._held: set[int] = set()
        self._judged = dict.fromkeys(RULES, 0)
        self._given = dict.fromkeys(RULES, 0)
        self.inlets = Inlets(stale_s=STALE_S, max_step_s=MAX_STEP_S, clear=CLEAR)
        self.room = RoomShift(self.inlets)

    def adopt(self, alerts: Iterable[OpenAlert]) -> None:
        """Open rack alerts of a store this detector takes over (a restart): a critical one
        paged a change its rack's air made, so the excess over its peers seen from the
        first sample now is that change, begun when the alert began (not a hot aisle)."""
        for a in alerts:
            if a.rule == "rack_cooling" and a.device.startswith("rack:") \
                    and a.state == "firing" and a.severity == "critical":
                code = self._rack_code_of((a.cluster, a.device[5:]))
                self.inlets.excess[code] = [0.0, a.started_ts]

    def drop(self, nodes: Iterable[str]) -> None:
        self.table.drop(nodes)
        self.inlets.drop(nodes)
        gone = set(nodes)
        for key in [k for k in self._flagged_nodes if k[1] in gone]:
            del self._flagged_nodes[key]
        self._node_codes = {k: v for k, v in self._node_codes.items() if k[1] not in gone}

    def explains(self, cluster: str, rack: str, node: str) -> bool:
        """Does a cooling finding hold now for this node's rack or the node itself (its
        GPUs' heat is the air's fault, not theirs: ``LemonScore.explained``)?"""
        code = self._racks.get((cluster, rack))
        return (code is not None and code in self._flagged) \
            or (cluster, node) in self._flagged_nodes

    def coverage(self) -> dict[str, tuple[int, int]]:
        """Per rule: (GPU samples judged, GPU samples given) since this detector was built.
        A sample is judged for ``rack_cooling`` where its GPU's model (or its node's inlet
        air) counted in a judgement of its rack, for ``node_cooling`` where it counted in
        one of its node."""
        return {rule: (self._judged[rule], self._given[rule]) for rule in RULES}

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        b = columns(frames)
        if not b.frames:
            return []
        slots = self.table.slots(b)
        codes = np.fromiter((self._rack_code(f) for f in b.frames), np.int64, len(b.frames))
        have = slots >= 0
        nodes = np.fromiter((self._node_code(f) for f in b.frames), np.int64, len(b.frames))
        self.table["rack"][slots[have]] = np.broadcast_to(codes[:, None], slots.shape)[have]
        self.table["node"][slots[have]] = np.broadcast_to(nodes[:, None], slots.shape)[have]
        now, limit = float(b.ts[-1]), self.c.model_forget_s
        self._held = {code for code, since in self._flagged.items() if now - since <= limit}
        racks = np.isin(codes, list(self._held))
        frozen = racks | self._frozen_nodes(b, now, limit)
        self.inlets.update(b.frames, codes.tolist(), racks.tolist(),
                           [cluster for cluster, _ in self._names])
        room = self.room.shift(codes, now, [cluster for cluster, _ in self._names],
                               self._flagged, self._held)
        for rows in b.waves:
            self.models.wave(b, rows, slots[rows], frozen[rows], room[rows])
        for rule in RULES:
            self._given[rule] += int(b.present.sum())
        return self._judge(b, codes, slots)

    def _rack_code(self, f: Frame) -> int:
        return self._rack_code_of((f.cluster, f.rack))

    def _rack_code_of(self, key: tuple[str, str]) -> int:
        code = self._racks.get(key)
        if code is None:
            code = self._racks[key] = len(self._names)
            self._names.append(key)
        return code

    def _node_code(self, f: Frame) -> int:
        code = self._node_codes.get((f.cluster, f.node))
        if code is None:
            code = self._node_codes[(f.cluster, f.node)] = self._node_next
            self._node_next += 1
        return code

    def _frozen_nodes(self, b: Batch, now: float, limit: float) -> np.ndarray:
        """Per frame: its node's finding holds (for at most ``limit`` seconds), so its GPUs'
        models stand still, as a held rack's do (``_held``)."""
        if not self._flagged_nodes:
            return np.zeros(len(b.frames), bool)
        return np.fromiter((now - self._flagged_nodes.get((f.cluster, f.node), -math.inf)
                            <= limit for f in b.frames), bool, len(b.frames))

    def _judge(self, b: Batch, codes: np.ndarray, slots: np.ndarray) -> list[Finding]:
        c, t = self.c, self.table
        now = float(b.ts[-1])
        rise, averaged = self.models.rise(now)
        live = np.isfinite(rise)
        rack = t["rack"][:len(rise)].astype(np.int64)
        size = len(self._names)
        flagged = np.zeros(size, bool)
        flagged[list(self._flagged)] = True
        # What the other racks' GPUs show too is the room's (its air, the facility's
        # water: the models have no input for them), not this rack's cooler.
        codes_live = np.unique(rack[live]).tolist()
        shared = others_median({code: float(np.median(rise[live & (rack == code)]))
                                for code in codes_live}, self._flagged)
        # Only the part of a shared rise beyond CLEAR of the line counts: the room's
        # daily swing and the other racks' usual spread around their models must not
        # delay one rack's finding.
        base = np.zeros(size)
        for code, value in shared.items():
            base[code] = max(0.0, value - CLEAR * c.rack_margin_c)
        # A flagged rack holds until it falls under CLEAR of the line that raised it.
        hot = live & (rise - base[np.maximum(rack, 0)]
                      > np.where(flagged[rack], CLEAR, 1.0) * c.rack_margin_c)
        judged = np.bincount(rack[live], minlength=size)
        pairs = np.unique(rack[live] * (self._node_next + 1) + t["node"][:len(rise)][live]
                          .astype(np.int64))
        nodes_live = np.bincount(pairs // (self._node_next + 1), minlength=size)
        gpu_judged = (judged >= c.rack_min_gpus) & (nodes_live >= 2)
        inlets = self.inlets.judge(now, c.rack_inlet_rise_c, c.warmup_s, flagged,
                                   [cluster for cluster, _ in self._names])
        peers = self.inlets.peers(now, c.rack_inlet_peer_c, c.rack_inlet_rise_c, flagged,
                                  [cluster for cluster, _ in self._names])
        out = []
        for code in np.unique(codes).tolist():
            finding = self._rack(b, codes, code, rise, live, hot, bool(gpu_judged[code]),
                                 inlets.get(code), code in self._held, peers.get(code))
            if finding is not None:
                out.append(finding)
                self._flagged.setdefault(code, now)
            elif self._flagged.pop(code, None) is not None:
                self._cleared[code] = now
        self._count_rack(b, codes, slots, live, gpu_judged, inlets)
        return out + self._nodes(b, codes, slots, rise, averaged)

    def _rack(self, b: Batch, codes: np.ndarray, code: int, rise: np.ndarray,
              live: np.ndarray, hot: np.ndarray, gpu_judged: bool,
              inlet: tuple[int, int, float, set[str]] | None, held: bool,
              peer: tuple[int, int, float, float] | None) -> Finding | None:
        """The rack's finding from its nodes' inlet air against the other racks' now, its
        GPUs' models and its nodes' inlet air against its own average, if any says so."""
        c, t = self.c, self.table
        rack = t["rack"][:len(rise)]
        said: list[str] = []
        evidence: dict[str, float] = {}
        value, since = 0.0, None
        above, peered, over, began = peer or (0, 0, 0.0, math.nan)
        # A page needs a change seen: the rack's excess over its peers growing, or its air or
        # GPUs above their own usual. Above its peers from fleetwatch's first sample of it
        # and no warmer since is a hot aisle or a failure older than the data: a warning,
        # which mutes none of its GPUs' alerts (inhibition.inhibited_by).
        changed = False
        if above >= max(2, c.rack_fraction * peered):
            # The strongest evidence, and it needs no history: first, and the value.
            steady = not math.isfinite(began)
            said.append(f"the inlet air of {above} of {peered} nodes is {over:.1f} °C above "
                        "the other racks' of its cluster" + (
                            " (so since fleetwatch's first sample of it: a hot aisle, or a "
                            "failure older than the data; it pages if it warms further)"
                            if steady else ""))
            evidence = {"nodes_inlet_above_peers": above, "nodes_inlet_peers_judged": peered,
                        "inlet_over_peers_c": round(over, 2)}
            value, since = over, None if steady else began
            changed = not steady
        members = np.flatnonzero(live & (rack == code))
        many = int(hot[members].sum())
        if gpu_judged and many >= c.rack_fraction * len(members):
            hot_nodes = {t.node_of[i] for i in members[hot[members]]}
            if len(hot_nodes) >= 2:  # one node's GPUs: its own cooling, not the rack's
                gpus = float(np.median(rise[members[hot[members]]]))
                value = value or gpus
                said.append(f"{many} of {len(members)} GPUs on {len(hot_nodes)} nodes run "
                            f"{gpus:.0f} °C above their usual temperature at their power")
                changed = True
                evidence |= {"gpus_hot": many, "gpus_judged": len(members),
                             "nodes_hot": len(hot_nodes), "median_rise_c": round(gpus, 2)}
        rising, nodes, air, _ = inlet or (0, 0, 0.0, set())
        if rising >= max(2, c.rack_fraction * nodes):
            usual = "its usual level against the other racks' air" if held else \
                "its ten-minute average"
            said.append(f"the inlet air of {rising} of {nodes} nodes is {air:.1f} °C above "
                        f"{usual}")
            evidence |= {"nodes_inlet_warm": rising, "nodes_inlet_judged": nodes,
                         "median_inlet_rise_c": round(air, 2)}
            value = value or air
            changed = True
        if not said:
            return None
        cluster, name = self._names[code]
        ts = float(b.ts[np.flatnonzero(codes == code)[-1]])
        return Finding(
            "rack_cooling", cluster, name, "", None, ts, value,
            f"Rack {name}: {'; '.join(said)}", "critical" if changed else "warning",
            c.rack_for_s, 0.0, evidence,
            "Check the rack's cooling (CRAH or in-row unit, rear-door heat exchanger, "
            "coolant flow and inlet temperature); move jobs off the rack if it keeps rising",
            "rack", since=since)

    def _count_rack(self, b: Batch, codes: np.ndarray, slots: np.ndarray, live: np.ndarray,
                    gpu_judged: np.ndarray,
                    inlets: dict[int, tuple[int, int, float, set[str]]]) -> None:
        """GPU samples of this batch that counted in their rack's judgement: their model
        did, or their node's inlet air did."""
        have = (slots >= 0) & b.present
        s = np.where(have, slots, 0)
        by_model = have & live[s] & gpu_judged[codes][:, None]
        by_air = np.fromiter(
            (f.node in inlets[code][3] if code in inlets and inlets[code][1] >= 2 else False
             for f, code in zip(b.frames, codes.tolist())), bool, len(b.frames))
        self._judged["rack_cooling"] += int((by_model | (have & by_air[:, None])).sum())

    def _nodes(self, b: Batch, codes: np.ndarray, slots: np.ndarray, rise: np.ndarray,
               averaged: np.ndarray) -> list[Finding]:
        """Node findings (``node_cooling.node_findings``); a node's finding holds from
        the first batch that finds it to the first that does not."""
        out, judged = node_findings(self.c, self.table, b, codes, slots, rise, averaged,
                                    self._flagged, self._cleared)
        self._judged["node_cooling"] += judged
        now = float(b.ts[-1])
        for f in b.frames:
            key = (f.cluster, f.node)
            if key in out:
                self._flagged_nodes.setdefault(key, now)
            else:
                self._flagged_nodes.pop(key, None)
        return list(out.values())
