"""What each fault does to the fleet's physics and readings, step by step.

``Effects.begin`` runs before the physics of a step and sets the modifiers the
physics reads (``Mods``); ``Effects.end`` runs after it and moves the error
counters, emits XIDs, fixes what the sensors read, and notes the first sample
each fault changed (the ground truth's ``first_faulty_ts``).

A ``job_hang`` takes the job on its node (or the first to start there after the
onset) and hangs it on all its nodes (``Mods.hang``; the physics in ``fleet.py``:
NCCL kernels resident on a few SMs, no tensor work, no bytes on NVLink or PCIe)
until the fault ends, when the job is killed, as NCCL's watchdog or its owner would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from fleetwatch.collectors.sim.faults import Fault, FaultRecord, check_subjects

if TYPE_CHECKING:
    from fleetwatch.collectors.sim.fleet import FleetSim

THERMAL = ("cooling", "cooling_slow", "rack_cooling")
SLOW_PEAK_C = 79.0  # cooling_slow: the degradation never takes the die above this
XID_DRIFT_REPLAYS_PER_MIN = 30.0


def ramp_s(f: Fault) -> float:
    """How long the fault takes to reach full strength."""
    half = f.duration_s / 2
    if f.kind == "cooling_slow":
        return f.duration_s * 0.8
    if f.resolved_mode == "sudden":
        # A fan or pump that stops changes the heat path within seconds: the GPU's
        # thermal resistance steps, and the die follows through its heat sink's time constant
        # (``TAU_SINK_S``), which is what spreads the fault over the first samples. A
        # rack's air takes minutes to warm when its cooling unit fails.
        return {"rack_cooling": 120.0}.get(f.kind, 0.0)
    slow = {"ecc_dbe": 3600.0, "sensor": 3600.0, "node_silent": 900.0}
    return min(half, slow.get(f.kind, 1800.0))


@dataclass
class Active:
    fault: Fault
    rack: int
    node: int        # -1 for a rack fault
    gpu: int         # -1 for node and rack faults
    onset: float
    end: float
    ramp: float
    rack_name: str
    node_name: str | None
    first_ts: float | None = None
    fired_ts: float | None = None   # one-shot event (XID 79, the DBE, link down) happened
    stage: int = 0                  # progress through a drift's milestones
    stuck_value: float = 0.0        # sensor: the impossible value it sticks at
    blocks: int = 1                 # stuck: the blocks its hung kernel holds SMs with
    ended: bool = False
    job: int = -1                   # job_hang: the job that hangs (its number), -1: none yet
    job_nodes: tuple[str, ...] = ()
    job_id: str | None = None

    def r(self, ts: float) -> float:
        return 1.0 if self.ramp <= 0 else min(1.0, max(0.0, (ts - self.onset) / self.ramp))

    def record(self) -> FaultRecord:
        f = self.fault
        return FaultRecord(f.kind, self.node_name, None if self.gpu < 0 else self.gpu,
                           self.onset, self.end, f.resolved_severity, f.resolved_mode,
                           self.rack_name, self.first_ts, self.job_nodes, self.job_id)


@dataclass
class Mods:
    """Per-step modifiers the physics reads; all neutral when no fault is active."""

    r_mult: np.ndarray
    slow_cap: np.ndarray
    inlet_add: np.ndarray
    stuck: np.ndarray
    clock_cap: np.ndarray
    act_mult: np.ndarray
    brake: np.ndarray
    limit: np.ndarray
    drop: np.ndarray
    hang: np.ndarray            # per node: its job is hung in a collective
    stuck_sm: np.ndarray        # a stuck GPU's SM activity: its hung kernel's share of SMs
    xids: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    any: bool = False

    @classmethod
    def neutral(cls, n: int, g: int, racks: int, limit_w: float) -> Mods:
        return cls(np.ones((n, g)), np.full((n, g), np.inf), np.zeros(racks),
                   np.zeros((n, g), bool), np.ones((n, g)), np.ones((n, g)),
                   np.zeros((n, g), bool), np.full((n, g), limit_w), np.zeros(n, bool),
                   np.zeros(n, bool), np.zeros((n, g)))


class Effects:
    def __init__(self, sim: FleetSim, faults: Sequence[Fault]) -> None:
        self.sim = sim
        # Its own random stream: a fault never shifts the healthy fleet's draws.
        self.rng = np.random.default_rng([sim.params.seed, 1])
        # The hung kernels' blocks draw from a stream of their own too, so that the other
        # faults' draws are what they were.
        blocks = np.random.default_rng([sim.params.seed, 4])
        self.active: list[Active] = []
        n, g = sim.params.nodes, sim.params.gpus
        self.mods = Mods.neutral(n, g, len(sim.rack_names), sim.part.power_limit_w)
        self._neutral = True
        nodes = {name: i for i, name in enumerate(sim.node_names)}
        racks = {name: i for i, name in enumerate(sim.rack_names)}
        try:
            check_subjects(faults, n, g, sim.params.nodes_per_rack)
        except ValueError as exc:
            raise ValueError(f"fault {exc}") from None
        for f in faults:
            if f.rack is not None:
                rack, node, gpu = racks[f.rack], -1, -1
            else:
                node = nodes[f.node]
                rack = int(sim.rack_of[node])
                gpu = -1 if f.gpu is None else f.gpu
            onset = sim.start_ts + f.start_s if f.onset_ts is None else f.onset_ts
            a = Active(f, rack, node, gpu, onset, onset + f.duration_s, ramp_s(f),
                       sim.rack_names[rack], f.node)
            a.stuck_value = float(self.rng.choice([0.0, 127.0]))
            # A kernel hung on a flag holds the SMs of its resident blocks: one block of a
            # hung reduction, up to NCCL's 32 channels, as a GPU stuck in a collective does.
            a.blocks = int(blocks.choice([1, 2, 4, 8, 16, 32]))
            self.active.append(a)

    @property
    def records(self) -> list[FaultRecord]:
        return [a.record() for a in self.active]

    def thermal_pending(self) -> bool:
        return any(a.fault.kind in THERMAL and a.first_ts is None and a.onset <= self.sim.ts < a.end
                   for a in self.active)

    # -- before the physics -------------------------------------------------
    def begin(self, ts: float) -> Mods:
        m = self.mods
        if not self._neutral:
            n, g = m.stuck.shape
            self.mods = m = Mods.neutral(n, g, len(m.inlet_add), self.sim.part.power_limit_w)
            self._neutral = True
        for a in self.active:
            if a.onset <= ts < a.end:
                self._neutral = False
                m.any = True
                self._apply(a, ts, m)
            elif ts >= a.end and not a.ended and a.onset <= ts:
                a.ended = True
                self._finish(a)
        return m

    def _apply(self, a: Active, ts: float, m: Mods) -> None:
        sim, f, k = self.sim, a.fault, a.fault.kind
        sev, r, i, j = f.resolved_severity, a.r(ts), a.node, a.gpu
        if k in ("cooling", "cooling_slow"):
            if a.ramp <= 0:
                # A step at onset: over the interval it falls in, only the part after it
                # (the sample taken at the onset itself shows nothing yet).
                r = min(1.0, max(0.0, (ts - a.onset) / sim.params.interval_s))
            m.r_mult[i, j] *= 1.0 + (sev - 1.0) * r
            if k == "cooling_slow":
                m.slow_cap[i, j] = SLOW_PEAK_C
        elif k == "rack_cooling":
            m.inlet_add[a.rack] += sev * r
        elif k == "stuck":
            m.stuck[i, j] = True
            m.stuck_sm[i, j] = a.blocks / sim.part.sms
        elif k == "straggler":
            cap = 1.0 - (1.0 - 1.0 / sev) * r
            m.clock_cap[i, j] *= cap
            # Its job waits for it. In lockstep every step takes as long as the straggler's
            # share: it stays as busy as before (at a lower clock), and every other GPU of
            # the job computes its share in that much less of the step and waits in NCCL
            # for the rest, its SM activity (and power) down by the same factor.
            num = int(sim.jobs.num[i])
            job = sim.jobs.running.get(num) if num >= 0 else None
            if job is not None and cap < 1.0:
                m.act_mult[list(job.nodes)] *= cap
                m.act_mult[i, j] /= cap
        elif k == "power_brake":
            if f.resolved_mode == "sudden":
                m.brake[i, j] = True
                m.clock_cap[i, j] *= 1.0 / sev
            else:
                top = sim.part.power_limit_w
                m.limit[i, j] = round(top - (top - top / sev) * r)
        elif k == "node_silent":
            m.drop[i] = r >= 1.0 or self.rng.random() < r
        elif k == "job_hang":
            job = sim.jobs.running.get(a.job)
            # A job that another job_hang fault hangs already cannot hang a second time:
            # this one waits for the next job to start on the node.
            num = int(sim.jobs.num[i])
            if job is None and a.job < 0 and num >= 0 and not any(
                    b is not a and b.fault.kind == "job_hang" and b.job == num
                    and b.onset <= ts < b.end for b in self.active):
                job = sim.jobs.running[num]
                a.job, a.job_id = job.num, job.id
                a.job_nodes = tuple(sim.node_names[n] for n in job.nodes)
            if job is not None:
                m.hang[job.nodes] = True
                # A hung job never finishes: it runs until it is killed (``_finish``).
                job.end_ts = max(job.end_ts, a.end + 1.0)
        elif k == "xid79":
            if a.fired_ts is not None and ts > a.fired_ts and not sim.lost[i, j]:
                sim.lose_gpu(i, j)
            elif a.fired_ts is None and r >= 1.0:
                a.fired_ts = ts
                m.xids[(i, j)] = m.xids.get((i, j), ()) + (79,)
        elif k == "ecc_dbe":
            if a.fired_ts is not None and ts > a.fired_ts and a.stage < 3:
                a.stage = 3
                sim.kill_job_on(i)  # XID 94/95: the application is terminated
            elif a.fired_ts is None and r >= 1.0:
                a.fired_ts = ts
                self._dbe(a, m)
        elif k == "nvlink" and a.fired_ts is None and r >= 1.0:
            a.fired_ts = ts
            c = sim.counters
            c["crc"][i, j] += self.rng.poisson(300 * sev) if f.resolved_mode == "sudden" else 0
            c["replay"][i, j] += self.rng.poisson(40 * sev) if f.resolved_mode == "sudden" else 0
            c["recovery"][i, j] += 2
            c["links_down"][i, j] = 1
            m.xids[(i, j)] = m.xids.get((i, j), ()) + (74,)

    def _dbe(self, a: Active, m: Mods) -> None:
        c, i, j = self.sim.counters, a.node, a.gpu
        for name in ("dbe_vol", "dbe_agg", "rows_unc"):
            c[name][i, j] += 1
        if a.fault.resolved_severity >= 2.0:
            c["remap_failure"][i, j] = 1
            xids = (48, 95, 64)
        else:
            c["remap_pending"][i, j] = 1
            xids = (48, 94, 63)
        m.xids[(i, j)] = m.xids.get((i, j), ()) + xids

    def _finish(self, a: Active) -> None:
        """The fault is over: the GPU was reset, the node rebooted, the link retrained."""
        sim, k, i, j = self.sim, a.fault.kind, a.node, a.gpu
        c = sim.counters
        if k == "xid79" and sim.lost[i, j]:
            sim.reboot_node(i)
        elif k == "ecc_dbe":
            c["remap_pending"][i, j] = 0
            c["remap_failure"][i, j] = 0
            c["sbe_vol"][i, j] = c["dbe_vol"][i, j] = 0
        elif k == "nvlink":
            c["links_down"][i, j] = 0
        elif k == "job_hang" and a.job in sim.jobs.running:
            sim.jobs.end(sim.jobs.running[a.job], sim.ts)

    # -- after the physics --------------------------------------------------
    def end(self, ts: float, dt: float) -> None:
        """Error counters, first faulty samples; the physics of this step is done."""
        sim, rng = self.sim, self.rng
        c = sim.counters
        for a in self.active:
            if not a.onset <= ts < a.end:
                continue
            f, k, i, j = a.fault, a.fault.kind, a.node, a.gpu
            sev, r = f.resolved_severity, a.r(ts)
            changed = False
            if k == "pcie_replay" or (k == "xid79" and f.resolved_mode == "drift"
                                      and a.fired_ts is None):
                per_min = sev if k == "pcie_replay" else XID_DRIFT_REPLAYS_PER_MIN
                add = rng.poisson(per_min * r * dt / 60.0)
                c["pcie"][i, j] += add
                changed = add > 0 or a.fired_ts is not None
            elif k == "xid79":
                changed = a.fired_ts is not None
            elif k == "ecc_dbe":
                if a.fired_ts is None:
                    add = rng.poisson(40.0 * r * r * dt / 15.0)
                    c["sbe_vol"][i, j] += add
                    c["sbe_agg"][i, j] += add
                    if r >= 0.5 and a.stage == 0:
                        a.stage = 1
                        c["rows_corr"][i, j] += 1
                        sim.mods.xids[(i, j)] = sim.mods.xids.get((i, j), ()) + (92,)
                    changed = add > 0 or a.stage > 0
                else:
                    changed = True
            elif k == "nvlink":
                if a.fired_ts is None or f.resolved_mode == "drift":
                    add = rng.poisson(40.0 * sev * r * r * dt / 15.0)
                    c["crc"][i, j] += add
                    c["replay"][i, j] += rng.poisson(add / 8.0)
                    c["recovery"][i, j] += rng.poisson(0.2 * sev * r ** 3)
                    changed = add > 0 or a.fired_ts is not None
                else:
                    changed = True
            elif k == "stuck":
                changed = bool(sim.jobs.busy[i]) and not sim.lost[i, j]
            elif k == "straggler":
                # a working GPU's clock and SM activity move with the cap at once
                changed = sim.act["util"][i, j] > 0 and sim.mods.clock_cap[i, j] < 1.0
            elif k == "power_brake":
                changed = (f.resolved_mode == "sudden"
                           or sim.mods.limit[i, j] < sim.part.power_limit_w)
            elif k == "sensor":
                true = sim.temp[i, j]
                read = a.stuck_value if f.resolved_mode == "sudden" else true - sev * r
                sim.temp_read[i, j] = read
                changed = round(read) != round(true)
            elif k == "node_silent":
                changed = bool(sim.mods.drop[i])
            elif k == "job_hang":
                changed = a.job in sim.jobs.running and bool(sim.mods.hang[i])
            elif k == "rack_cooling":
                # the nodes' inlet sensors report hundredths of a degree
                changed = sim.mods.inlet_add[a.rack] >= 0.005
            elif k in ("cooling", "cooling_slow") and sim.shadow is not None:
                changed = round(sim.temp[i, j]) != round(sim.shadow[i, j]) or (
                    sim.shadow_mem is not None
                    and round(sim.mem_temp[i, j]) != round(sim.shadow_mem[i, j]))
            if changed and a.first_ts is None:
                a.first_ts = ts
