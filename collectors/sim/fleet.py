"""The simulated fleet: N nodes x G GPUs in racks, running LLM-training-like jobs.

Modelled on an A100-SXM4-80GB (values from a real ``nvidia-smi -q -x``: 500 W
limit, slowdown at 89 °C, shutdown at 92 °C, ~65 W and ~27 °C idle):

* jobs start on idle nodes (some spanning several nodes), run, end; idle gaps;
* power follows utilization, with per-GPU efficiency spread;
* temperature follows power through a first-order thermal lag over the rack's
  inlet air, which drifts through the day, with per-GPU thermal resistance;
* above the slowdown temperature the clocks and power are held down and the
  thermal throttle flags are set, as the driver does.

Everything is vectorized over GPUs and deterministic under ``seed``. Time is
simulation time: the caller decides how fast it runs against the wall clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.collectors.sim.faults import Fault, FaultRecord
from fleetwatch.frame import Frame, GpuReading, HostReading

MODEL = "NVIDIA A100-SXM4-80GB"
FB_TOTAL = 81920 * 2**20
POWER_LIMIT_W = 500.0
SLOWDOWN_C, SHUTDOWN_C = 89.0, 92.0
SM_CLOCK_IDLE, SM_CLOCK_MAX, MEM_CLOCK = 210.0, 1410.0, 1593.0
THERMAL_FLAGS = THROTTLE_FLAGS["sw_thermal_slowdown"] | THROTTLE_FLAGS["hw_thermal_slowdown"]
IDLE_FLAG = THROTTLE_FLAGS["gpu_idle"]
COOLING_RAMP_S = 300.0


@dataclass(frozen=True)
class SimParams:
    nodes: int = 4
    gpus: int = 8
    nodes_per_rack: int = 2
    seed: int = 0
    interval_s: float = 15.0
    cluster: str = "sim"
    job_mean_s: float = 3 * 3600.0   # mean job length
    idle_mean_s: float = 20 * 60.0   # mean idle gap between jobs on a node
    busy_at_start: float = 0.75      # share of nodes already in a job at t=0


class FleetSim:
    def __init__(self, params: SimParams, start_ts: float, faults: Sequence[Fault] = ()) -> None:
        p = self.params = params
        self.start_ts = self.ts = float(start_ts)
        self._rng = np.random.default_rng(p.seed)
        rng = self._rng
        n, g = p.nodes, p.gpus
        self.node_names = [f"node-{i:03d}" for i in range(n)]
        self.rack_of = np.arange(n) // p.nodes_per_rack
        self.rack_names = [f"rack-{r:02d}" for r in range(int(self.rack_of.max()) + 1)]
        self.uuids = [[_uuid(rng) for _ in range(g)] for _ in range(n)]
        self._node_racks = [self.rack_names[r] for r in self.rack_of]
        # Per-GPU physical spread.
        self.p_idle = rng.normal(62.0, 3.0, (n, g))
        self.p_full = rng.normal(410.0, 20.0, (n, g))
        self.r_th = rng.normal(0.105, 0.006, (n, g))      # °C per W above inlet
        self.tau = rng.normal(45.0, 5.0, (n, g)).clip(20)  # s
        self.rack_offset = rng.normal(0.0, 0.8, len(self.rack_names))
        self._inlet_walk = np.zeros(len(self.rack_names))
        # State.
        self.util = np.zeros((n, g))
        self.energy = rng.uniform(1e8, 5e9, (n, g))         # J since driver load
        self.job = np.full(n, -1)
        self.job_end = np.zeros(n)
        self.next_start = np.zeros(n)
        self._job_seq = 0
        self._queued_size = 0
        self._seq = 0
        self.temp = self._inlet()[self.rack_of][:, None] + self.r_th * self.p_idle
        self.power = self.p_idle.copy()
        self._throttle = np.ones((n, g))
        self._resolve_faults(faults)
        busy = rng.random(n) < p.busy_at_start
        for i in np.flatnonzero(busy):
            self._start_job([int(i)], remaining=rng.exponential(p.job_mean_s))
        self.next_start[~busy] = self.ts + rng.exponential(p.idle_mean_s, int((~busy).sum()))

    # -- faults ---------------------------------------------------------
    def _resolve_faults(self, faults: Sequence[Fault]) -> None:
        index = {name: i for i, name in enumerate(self.node_names)}
        self.faults: list[tuple[Fault, int, float, float]] = []
        self.ground_truth: list[FaultRecord] = []
        for f in faults:
            if f.node not in index:
                raise ValueError(f"fault on {f.node!r}: no such node (nodes are "
                                 f"{self.node_names[0]} .. {self.node_names[-1]})")
            if not 0 <= f.gpu < self.params.gpus:
                raise ValueError(f"fault on {f.node}/{f.gpu}: GPUs are 0..{self.params.gpus - 1}")
            onset = self.start_ts + f.start_s
            self.faults.append((f, index[f.node], onset, onset + f.duration_s))
            self.ground_truth.append(FaultRecord(f.kind, f.node, f.gpu, onset,
                                                 onset + f.duration_s, f.severity))

    def _cooling_factor(self) -> np.ndarray:
        factor = np.ones_like(self.r_th)
        for f, node, onset, end in self.faults:
            if f.kind == "cooling" and onset <= self.ts < end:
                ramp = min(1.0, (self.ts - onset) / COOLING_RAMP_S)
                factor[node, f.gpu] *= 1.0 + (f.severity - 1.0) * ramp
        return factor

    # -- jobs -----------------------------------------------------------
    def _start_job(self, nodes: list[int], remaining: float) -> None:
        self._job_seq += 1
        for i in nodes:
            self.job[i] = 4_000_000 + self._job_seq
            self.job_end[i] = self.ts + max(remaining, 5 * 60.0)

    def _schedule(self) -> None:
        """End jobs that are due; start the queued job once enough nodes are free.

        The queue is one job deep: its size (1, 2 or 4 nodes) is drawn when it
        is queued, and it waits, as on a real scheduler, until that many nodes
        are idle, so multi-node jobs are as common as the draw says.
        """
        p, rng = self.params, self._rng
        ended = (self.job >= 0) & (self.job_end <= self.ts)
        for i in np.flatnonzero(ended):
            self.job[i] = -1
            self.next_start[i] = self.ts + rng.exponential(p.idle_mean_s)
        while True:
            if self._queued_size == 0:
                self._queued_size = min(p.nodes, int(rng.choice([1, 2, 4], p=[0.5, 0.3, 0.2])))
            ready = np.flatnonzero((self.job < 0) & (self.next_start <= self.ts))
            if len(ready) < self._queued_size:
                return
            self._start_job([int(i) for i in ready[:self._queued_size]],
                            rng.lognormal(math.log(p.job_mean_s) - 0.5, 1.0))
            self._queued_size = 0

    # -- physics ----------------------------------------------------------
    def _inlet(self) -> np.ndarray:
        day = 2 * math.pi * ((self.ts % 86400) / 86400)
        return 22.0 + 1.5 * math.sin(day - 2.0) + self.rack_offset + self._inlet_walk

    def step(self) -> None:
        """Advance the fleet by one interval."""
        p, rng = self.params, self._rng
        dt = p.interval_s
        self.ts += dt
        self._schedule()
        shape = self.util.shape
        busy = (self.job >= 0)[:, None]
        target = np.where(busy, rng.normal(0.93, 0.04, shape).clip(0.5, 1.0), 0.0)
        self.util = self.util + (target - self.util) * (1.0 - math.exp(-dt / 20.0))
        self._inlet_walk = (self._inlet_walk + rng.normal(0.0, 0.03, self._inlet_walk.shape)
                            * math.sqrt(dt / 15.0)).clip(-2.0, 2.0)
        inlet = self._inlet()[self.rack_of][:, None]
        power = self.p_idle + (self.p_full - self.p_idle) * self.util ** 1.2
        power = power + rng.normal(0.0, 4.0, shape)
        # Near slowdown the driver steps clocks (and so power and heat) down, and
        # back up once it cools: an integrating controller that holds the GPU
        # just under its slowdown temperature instead of oscillating.
        error = self.temp - (SLOWDOWN_C - 1.0)
        self._throttle = np.clip(self._throttle - 0.015 * error * (dt / 15.0), 0.4, 1.0)
        throttle = self._throttle
        power = np.minimum(self.p_idle + (power - self.p_idle) * throttle, POWER_LIMIT_W)
        self.power = power.clip(30.0, POWER_LIMIT_W)
        t_ss = inlet + self.r_th * self._cooling_factor() * self.power
        self.temp = t_ss + (self.temp - t_ss) * np.exp(-dt / self.tau)
        self.temp = self.temp + rng.normal(0.0, 0.25, shape)
        self.energy = self.energy + self.power * dt

    # -- frames -----------------------------------------------------------
    def frames(self) -> list[Frame]:
        """The fleet's state now, as one frame per node."""
        p, rng = self.params, self._rng
        shape = self.util.shape
        util = self.util
        busy = (self.job >= 0)[:, None]
        throttle = self._throttle
        throttled = throttle < 1.0
        sm_clock = np.where(util > 0.05, SM_CLOCK_MAX * throttle, SM_CLOCK_IDLE)
        flags = np.where(throttled, THERMAL_FLAGS, np.where(util < 0.05, IDLE_FLAG, 0))
        fb_used = np.where(busy, rng.uniform(0.72, 0.92, shape) * FB_TOTAL, 512 * 2**20)
        mem_temp = self.temp + 10.0 + 6.0 * util + rng.normal(0.0, 0.3, shape)
        cols = {
            "gpu_util_pct": (util * 100.0).round(0),
            "gpu_sm_active_ratio": util * 0.88,
            "gpu_tensor_active_ratio": util * 0.52,
            "gpu_power_w": self.power.round(2),
            "gpu_energy_j": self.energy.round(3),
            "gpu_temp_c": self.temp.round(0),
            "gpu_mem_temp_c": mem_temp.round(0),
            "gpu_sm_clock_mhz": sm_clock.round(0),
            "gpu_mem_clock_mhz": np.full(shape, MEM_CLOCK),
            "gpu_fb_used_bytes": fb_used.round(0),
            "gpu_throttle_reasons": flags.astype(float),
        }
        names = list(cols)
        # (node, gpu, metric) nested lists: one dict(zip()) per GPU is the cheap way in.
        table = np.stack(list(cols.values()), axis=-1).tolist()
        host_cpu = np.where(self.job >= 0, rng.normal(38.0, 5.0, p.nodes),
                            rng.normal(3.0, 1.0, p.nodes)).clip(0.0, 100.0).round(1).tolist()
        inlet = self._inlet()[self.rack_of].round(2).tolist()
        self._seq += 1
        seq, ts, cluster = self._seq, self.ts, p.cluster
        frames = []
        for i, job_id in enumerate(self.job.tolist()):
            job = str(job_id) if job_id >= 0 else None
            uuids, rows = self.uuids[i], table[i]
            gpus = tuple([GpuReading(j, uuids[j], MODEL, dict(zip(names, rows[j])), job)
                          for j in range(len(rows))])
            host = HostReading({"host_cpu_util_pct": host_cpu[i],
                                "host_inlet_temp_c": inlet[i],
                                "host_mem_total_bytes": 2.0 * 2**40,
                                "host_mem_used_bytes": 2.0**40 * (0.45 if job else 0.05)})
            frames.append(Frame(cluster, self._node_racks[i], self.node_names[i], ts, gpus, host,
                                seq=seq))
        return frames


def _uuid(rng: np.random.Generator) -> str:
    h = rng.bytes(16).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
