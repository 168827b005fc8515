"""The simulated fleet: N nodes x G GPUs in racks, running LLM-training jobs.

The part is an A100-SXM4-80GB or an H100 80GB HBM3 (``SimParams.part``;
``hardware.py`` says where each number comes from). Each step:

* jobs start, end and change phase (``jobs.py``); the phase sets each GPU's SM,
  tensor and DRAM activity and ``gpu_util_pct`` (a kernel was running: 100 in
  an NCCL wait, while the SMs idle), with a per-GPU spread;
* power follows activity and clocks (dynamic power ~ f^2.5); over the enforced
  limit the driver lowers the clock (``sw_power_cap``);
* the die sits a step above its heat sink that follows its power within the
  second, and the heat sink follows power through a lag over the node's inlet
  air (the rack's air, drifting through the day), with per-GPU thermal
  resistance (both fit to a real H100's readings); at the slowdown threshold
  an integrating controller holds the clocks down (thermal throttle flags);
  the HBM follows the die;
* the energy counter is the exact integral of power (power is linear between
  samples, so the counter's increase is the trapezoid of the two readings);
* NVLink and PCIe carry what the phase moves (``jobs.LINKS``, shares of the
  part's peak): NVLink as byte counters since the driver loaded, PCIe as
  bytes/s, as NVML reports them; an idle, stuck or hung GPU's links carry
  nothing but the driver's and the monitoring's few hundred KB/s on PCIe. Their
  noise has its own random stream, so the rest of the fleet is what it was;
* faults (``faults.py``, ``effects.py``) change what they touch.

Vectorized over GPUs and deterministic under ``seed``. Time is simulation
time: the caller decides how fast it runs against the wall clock.
``step()`` alone is the energy-only fast path: it builds no frames, and
``energy_j``/``energy_by()`` hold the ground truth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fleetwatch.collectors.sim import hardware as hw
from fleetwatch.collectors.sim.effects import Effects
from fleetwatch.collectors.sim.faults import Fault, FaultRecord
from fleetwatch.collectors.sim.frames import build_frames
from fleetwatch.collectors.sim.jobs import Jobs
from fleetwatch.collectors.sim.params import SimParams

COUNTERS = ("pcie", "crc", "replay", "recovery", "links_down", "sbe_vol", "dbe_vol", "sbe_agg",
            "dbe_agg", "rows_corr", "rows_unc", "remap_pending", "remap_failure")


class FleetSim:
    def __init__(self, params: SimParams, start_ts: float, faults: Sequence[Fault] = ()) -> None:
        p = self.params = params
        if p.nodes < 1 or p.gpus < 1 or p.nodes_per_rack < 1 or not p.interval_s > 0:
            raise ValueError(f"simulated fleet: nodes, gpus and nodes_per_rack must be >= 1 and "
                             f"interval_s > 0, got {p}")
        self.part = pt = hw.part(p.part)
        self.start_ts = self.ts = float(start_ts)
        self.rng = rng = np.random.default_rng(p.seed)
        n, g = p.nodes, p.gpus
        shape = (n, g)
        self.node_names = [f"node-{i:03d}" for i in range(n)]
        self.rack_of = np.arange(n) // p.nodes_per_rack
        self.rack_names = [f"rack-{r:02d}" for r in range(int(self.rack_of.max()) + 1)]
        self.uuids = [[_uuid(rng) for _ in range(g)] for _ in range(n)]
        # Per-GPU and per-node physical spread, fixed for life.
        self.p_idle = rng.normal(pt.p_idle_w, 3.0, shape)
        self.p_dyn = rng.normal(pt.p_dyn_w, pt.p_dyn_w / 20.8, shape)  # 25 W of 520
        r_sd = pt.r_th / 25                                           # 4%, clipped at 8%
        self.r_th = rng.normal(pt.r_th, r_sd, shape).clip(pt.r_th - 2 * r_sd, pt.r_th + 2 * r_sd)
        self.r_die = self.r_th * pt.r_die_share        # die to heat sink
        self.r_sink = self.r_th - self.r_die           # heat sink to the GPU's air
        self.tau = rng.normal(pt.tau_sink_s, 3.0, shape).clip(12.0)
        # The die's own fluctuation is a process in time (Ornstein-Uhlenbeck through the
        # lag), not one per sample: its step is scaled so that its spread is the same at
        # any interval, the spread a 0.25 °C step gives at 15 s (scale 1 there).
        now, ref = np.exp(-p.interval_s / self.tau), np.exp(-15.0 / self.tau)
        self.tnoise_scale = np.sqrt((1.0 - now ** 2) / (1.0 - ref ** 2))
        self.mem_off = rng.normal(0.0, 1.5, shape)
        hot = rng.random(shape) < p.hot_share
        self.hot_offset = np.where(hot, rng.uniform(3.0, 5.0, shape), 0.0)
        # Nodes higher in the rack breathe warmer air.
        self.node_offset = (np.arange(n) % p.nodes_per_rack) * 0.25 + rng.normal(0.0, 0.4, n)
        self.rack_offset = rng.normal(0.0, 0.8, len(self.rack_names))
        self._inlet_walk = np.zeros(len(self.rack_names))
        # PCIe and NVLink links with a few errors a day that mean nothing (real fleets
        # have them: a detector must look at rates, not at any increase).
        self.replay_rate = np.where(rng.random(shape) < 0.03, 2.0 / 86400, 0.0)
        self.crc_rate = np.where(rng.random(shape) < 0.02, 4.0 / 86400, 0.0)
        self.counters = {name: np.zeros(shape) for name in COUNTERS}
        self.counters["sbe_agg"] = np.where(rng.random(shape) < 0.05,
                                            rng.integers(1, 20, shape), 0).astype(float)
        self.counters["rows_corr"] = np.where(rng.random(shape) < 0.02, 1.0, 0.0)
        if p.jobs_seed is not None:  # the same hardware, another history
            self.rng = rng = np.random.default_rng([p.seed, 2, p.jobs_seed])
        # State.
        self.lost = np.zeros(shape, bool)
        self.energy_j = np.zeros(shape)                   # ground truth since start_ts
        self.energy_base = rng.uniform(1e8, 5e9, shape)   # counter at start: J since driver load
        self._job_energy = np.zeros(1024)
        self.idle_energy_j = 0.0
        self.unseen_energy_j = 0.0
        inlet = self._inlet(np.zeros(len(self.rack_names)))
        air = inlet[:, None] + pt.preheat_c
        self.power = self.p_idle.copy()
        self.sink = air + self.r_sink * self.power + self.hot_offset
        self.temp = self.sink + self.r_die * self.power
        self.mem_temp = air + pt.mem_base_c + self.mem_off + pt.mem_coupling * (self.temp - air)
        self.temp_read = self.temp.copy()
        # The die and its HBM without the fault (while a thermal fault is yet to show).
        self.shadow: np.ndarray | None = None
        self.shadow_mem: np.ndarray | None = None
        self._shadow_sink: np.ndarray | None = None
        self.throttle = np.ones(shape)
        self.inlet = inlet
        self.act = {k: np.zeros(shape) for k in ("sm", "tensor", "dram", "occ", "util")}
        self.clock = np.full(shape, pt.sm_clock_idle)
        self.flags = np.full(shape, float(hw.FLAG_IDLE))
        self.limit = np.full(shape, pt.power_limit_w)
        self.host_cpu = np.full(n, 3.0)
        # Links: their own stream (see the docstring), counters since the driver loaded.
        self._link_rng = np.random.default_rng(
            [p.seed, 3] if p.jobs_seed is None else [p.seed, 3, p.jobs_seed])
        self.nvlink_tx = self._link_rng.uniform(1e12, 5e14, shape).round()
        self.nvlink_rx = self.nvlink_tx.copy()
        self.pcie_tx = np.zeros(shape)
        self.pcie_rx = np.zeros(shape)
        self._seq = 0
        self.jobs = Jobs(n, g, rng, p.job_mean_s, p.idle_mean_s, p.steady_load,
                         p.first_job_id)
        self.effects = Effects(self, faults)
        self.mods = self.effects.mods
        busy = rng.random(n) < (1.0 if p.steady_load else p.busy_at_start)
        for i in np.flatnonzero(busy):
            job = self.jobs.start([int(i)], self.ts, rng.exponential(p.job_mean_s))
            if not p.steady_load:  # mid-job, not all initialising
                job.phase_end = self.ts + rng.exponential(600.0)
        self.jobs.next_start[~busy] = self.ts + rng.exponential(p.idle_mean_s,
                                                                int((~busy).sum()))

    # -- ground truth -------------------------------------------------------
    @property
    def ground_truth(self) -> list[FaultRecord]:
        """One record per injected fault, with its first faulty sample so far."""
        return self.effects.records

    @property
    def hot_gpus(self) -> list[tuple[str, int, float]]:
        """Healthy GPUs that run hot all their life: (node, gpu, °C above their peers)."""
        return [(self.node_names[i], int(j), float(self.hot_offset[i, j]))
                for i, j in zip(*np.nonzero(self.hot_offset))]

    def energy_by(self, key: str) -> dict[str | None, float]:
        """Ground-truth GPU energy (J) since start per ``job``, ``user`` or ``team``.

        Each interval's energy goes to the job the interval's closing sample
        names; idle GPUs' energy is under None.
        """
        out: dict[str | None, float] = {None: self.idle_energy_j}
        for num, job in self.jobs.by_num.items():
            name = job.id if key == "job" else job.info[key]
            out[name] = out.get(name, 0.0) + float(self._job_energy[num])
        return out

    @property
    def energy_counter_j(self) -> np.ndarray:
        """What ``gpu_energy_j`` reads now, per (node, GPU): J since the driver loaded."""
        return self.energy_base + self.energy_j

    @property
    def node_jobs(self) -> list[str | None]:
        """The job each node runs now (None: idle), as the frames name it."""
        by_num = self.jobs.by_num
        return [by_num[k].id if k >= 0 else None for k in self.jobs.num.tolist()]

    # -- changes the faults make --------------------------------------------
    def kill_job_on(self, node: int) -> None:
        num = int(self.jobs.num[node])
        if num >= 0:
            self.jobs.end(self.jobs.running[num], self.ts)

    def lose_gpu(self, node: int, gpu: int) -> None:
        self.lost[node, gpu] = True
        self.kill_job_on(node)
        self.jobs.drained[node] = True

    def reboot_node(self, node: int) -> None:
        """Back after a reboot: lost GPUs return, counters since driver load restart."""
        self.lost[node] = False
        self.jobs.drained[node] = False
        self.energy_base[node] = -self.energy_j[node]
        for name in ("sbe_vol", "dbe_vol"):
            self.counters[name][node] = 0
        self.nvlink_tx[node] = self.nvlink_rx[node] = 0.0

    # -- physics ----------------------------------------------------------
    def _inlet(self, add: np.ndarray) -> np.ndarray:
        day = 2 * math.pi * ((self.ts % 86400) / 86400)
        p = self.params
        rack = p.inlet_c + 1.5 * math.sin(day - 2.0) + self.rack_offset + self._inlet_walk
        return (rack + add + self._warm_spell())[self.rack_of] + self.node_offset

    def _warm_spell(self) -> float:
        """The warm spell's share now: the whole room's air, so every rack alike."""
        p = self.params
        if p.warm_spell_h <= 0.0:
            return p.warm_spell_c
        share = (self.ts - self.start_ts) / (p.warm_spell_h * 3600.0)
        return p.warm_spell_c * min(1.0, max(0.0, share))

    def step(self) -> None:
        """Advance the fleet by one interval (no frames built: the energy fast path)."""
        p, rng, dt, pt = self.params, self.rng, self.params.interval_s, self.part
        self.ts += dt
        m = self.mods = self.effects.begin(self.ts)
        if m.any and self.effects.thermal_pending() and self.shadow is None:
            self.shadow, self._shadow_sink = self.temp.copy(), self.sink.copy()
            self.shadow_mem = self.mem_temp.copy()
        self.jobs.advance(self.ts)
        j, shape = self.jobs, self.temp.shape
        busy = j.busy[:, None] & ~self.lost
        # Activity: the phase's level x the GPU's spread, and noise.
        mult = j.gpu_mult * m.act_mult
        sm_t = j.sm[:, None] * mult
        noise = rng.standard_normal((3, *shape))
        sm = (sm_t + (0.012 + 0.05 * sm_t) * noise[0]).clip(0.0, 1.0)
        scale = np.divide(sm, sm_t, out=np.zeros(shape), where=sm_t > 1e-9)
        tensor = (j.tensor[:, None] * mult * scale).clip(0.0, sm)
        occ = (j.occ[:, None] * mult * scale).clip(0.0, 1.0)
        dram = (j.dram[:, None] * mult + 0.01 * noise[1]).clip(0.0, 1.0)
        util_t = j.util[:, None]
        # Spread where kernels run only part of the time; none with no kernel at all.
        spread = 0.12 * np.minimum(util_t, 100.0 - util_t) + 0.3 * (util_t > 0)
        util = (util_t + noise[2] * spread).clip(0.0, 100.0).round()
        spin = quiet = None
        if m.any:
            # A hung kernel (a GPU stuck; every rank of a hung job blocked in a collective,
            # NCCL's kernels spinning on one SM per channel) is resident all the time on the
            # few SMs its blocks hold, computes nothing and touches no memory. A real H100's
            # (tests/data/recorded/h100_phases.jsonl.gz, 8 blocks): SM activity 0.060, DRAM
            # 6e-6, 130 W: 6 W over a GPU holding its clock with no work. Its SMs count for
            # no power here: the H100 draws its held clock's 124 W, within 5% of that.
            hung = m.hang[:, None] & busy
            spin = np.where(m.stuck & busy, m.stuck_sm, -1.0)
            if hung.any():
                spin = np.where(hung, (0.06 * j.gpu_mult + 0.004 * noise[0]).clip(0.02, 0.12),
                                spin)
            quiet = spin >= 0.0
            sm[quiet] = tensor[quiet] = occ[quiet] = dram[quiet] = 0.0
            util[quiet] = 100.0  # the hung kernel still counts as running
        util[~busy] = 0.0
        sm[~busy] = tensor[~busy] = occ[~busy] = dram[~busy] = 0.0
        # Power and clocks.
        clocked = busy & (util > 0)
        fr = np.where(clocked, self.throttle * m.clock_cap, pt.sm_clock_idle / pt.sm_clock_max)
        act = hw.activity(pt, sm, tensor, dram)
        base = self.p_idle + pt.p_clocked_w * clocked
        dyn = self.p_dyn * act
        demand = base + dyn * fr ** hw.CLOCK_POWER_EXP
        limit = m.limit
        capped = clocked & (demand > limit)
        if capped.any():
            room = np.maximum(limit - base, 1.0) / np.maximum(dyn, 1.0)
            fr = np.where(capped, np.minimum(fr, room ** (1 / hw.CLOCK_POWER_EXP)), fr)
            demand = base + dyn * fr ** hw.CLOCK_POWER_EXP
        power = (demand + rng.standard_normal(shape) * (1.0 + 0.006 * demand)).clip(30.0, limit)
        if quiet is not None and quiet.any():
            sm[quiet] = spin[quiet]
            occ[quiet] = spin[quiet] * 0.25  # 16 warps a block (512 threads) of an SM's 64
            dram[quiet] = 6e-6
        # Heat: the die sits r_die * power above its heat sink, which lags toward the
        # inlet air; throttling at the slowdown threshold.
        self._inlet_walk = (self._inlet_walk + rng.normal(0.0, 0.03, self._inlet_walk.shape)
                            * math.sqrt(dt / 15.0)).clip(-1.0, 1.0)
        self.inlet = inlet = self._inlet(m.inlet_add)
        air = inlet[:, None] + pt.preheat_c
        # A cooling fault (fan, airflow, cold plate, coolant) adds resistance between the
        # sink and the air: r_mult is what it does to the whole path. The sink's heat
        # capacity is the same, so its time constant grows with its resistance.
        r_sink = self.r_sink + (m.r_mult - 1.0) * self.r_th
        s_ss = air + r_sink * power + self.hot_offset
        decay = np.exp(-dt / (self.tau * (r_sink / self.r_sink)))
        tnoise = rng.normal(0.0, 0.25, shape) * self.tnoise_scale
        if m.any:
            # What this GPU would be at without the fault: cooling_slow stops at its
            # sub-limit peak, and the shadow gives the first sample a fault changed.
            nominal = self._inlet(np.zeros_like(m.inlet_add))[:, None] + self.r_sink * power
            nominal += self.hot_offset + pt.preheat_c
            cap = m.slow_cap - self.r_die * power
            s_ss = np.where(s_ss > cap, np.maximum(nominal, cap), s_ss)
            if self._shadow_sink is not None:
                self._shadow_sink = (nominal + (self._shadow_sink - nominal)
                                     * np.exp(-dt / self.tau) + tnoise)
                self.shadow = self._shadow_sink + self.r_die * power
        self.sink = s_ss + (self.sink - s_ss) * decay + tnoise
        self.temp = self.sink + self.r_die * power
        hold = pt.slowdown_c + 1.0
        hw_slow = self.temp > hold
        if hw_slow.any():
            # HW slowdown acts within milliseconds, far inside one interval: it holds
            # the die at its threshold by cutting clocks (and so power) to what the
            # die-to-sink path carries there; the sink then settles at that power.
            p_hold = (hold - self.sink) / self.r_die
            power = np.where(hw_slow, np.clip(p_hold, base, power), power)
            room = np.maximum(power - base, 0.0) / np.maximum(dyn, 1.0)
            fr = np.where(hw_slow, np.minimum(fr, room ** (1 / hw.CLOCK_POWER_EXP)), fr)
            self.temp = np.where(hw_slow, self.sink + self.r_die * power, self.temp)
            self.throttle = np.where(hw_slow, np.minimum(self.throttle, fr), self.throttle)
        err = self.temp - (pt.slowdown_c - 1.0)
        self.throttle = np.clip(self.throttle - 0.015 * err * (dt / 15.0), 0.1, 1.0)
        mem_decay = math.exp(-dt / pt.tau_mem_s)
        m_base = air + pt.mem_base_c + self.mem_off + pt.mem_dram_c * dram
        m_ss = m_base + pt.mem_coupling * (self.temp - air)
        self.mem_temp = m_ss + (self.mem_temp - m_ss) * mem_decay
        if self.shadow is not None and self.shadow_mem is not None:
            m_ss = m_base + pt.mem_coupling * (self.shadow - air)
            self.shadow_mem = m_ss + (self.shadow_mem - m_ss) * mem_decay
        # Readings the frames carry.
        self.act = {"sm": sm, "tensor": tensor, "dram": dram, "occ": occ, "util": util}
        self.clock = np.where(clocked, np.floor(fr * pt.sm_clock_max / pt.sm_clock_step)
                              * pt.sm_clock_step, pt.sm_clock_idle).clip(pt.sm_clock_idle)
        flags = np.where(clocked, 0, hw.FLAG_IDLE) | np.where(capped, hw.FLAG_POWER_CAP, 0)
        flags |= np.where(self.throttle < 1.0, hw.FLAG_THERMAL, 0)
        if m.any:
            flags |= np.where(m.brake, hw.FLAG_POWER_BRAKE, 0)
        self.flags = flags.astype(float)
        self.limit = limit
        self.host_cpu = (j.host_cpu + rng.normal(0.0, 2.0, p.nodes)).clip(0.5, 100.0)
        self.temp_read = self.temp
        self._links(busy, m.stuck | m.hang[:, None] if m.any else None, dt)
        if self.replay_rate.any():
            self.counters["pcie"] += rng.poisson(self.replay_rate * dt)
        if self.crc_rate.any():
            self.counters["crc"] += rng.poisson(self.crc_rate * dt)
        if m.any:
            self.temp_read = self.temp.copy()
            self.effects.end(self.ts, dt)
            if self.shadow is not None and not self.effects.thermal_pending():
                self.shadow = self.shadow_mem = self._shadow_sink = None
        self._account(power, dt)

    def _links(self, busy: np.ndarray, quiet: np.ndarray | None, dt: float) -> None:
        """What NVLink and PCIe move this interval; nothing on ``quiet`` GPUs (a hung kernel)."""
        j, pt, rng = self.jobs, self.part, self._link_rng
        shape = busy.shape
        noise = rng.normal(1.0, 0.1, (3, *shape)).clip(0.5, 1.5)
        moving = busy if quiet is None else busy & ~quiet
        nvlink = np.where(moving, j.nvlink[:, None] * pt.nvlink_bytes_per_s, 0.0)
        pcie = np.where(moving, j.pcie[:, None] * pt.pcie_bytes_per_s, 0.0)
        # The driver's and the monitoring's own traffic: a few hundred KB/s.
        background = 2e5 * noise[2]
        self.nvlink_tx += (nvlink * noise[0] * dt).round()
        self.nvlink_rx += (nvlink * noise[1] * dt).round()
        self.pcie_tx = (pcie * noise[1] + background).round()
        self.pcie_rx = (pcie * noise[0] + background).round()

    def _account(self, power: np.ndarray, dt: float) -> None:
        """Integrate power (trapezoid: exact for power linear between samples) and attribute it."""
        e = (self.power + power) * (0.5 * dt)
        self.power = power
        self.energy_j += e
        per_node = e.sum(axis=1)
        num = self.jobs.num
        while num.max(initial=-1) >= len(self._job_energy):
            self._job_energy = np.concatenate([self._job_energy, np.zeros(len(self._job_energy))])
        busy = num >= 0
        if busy.any():
            # bincount: np.add.at is several times slower for this scatter-add
            add = np.bincount(num[busy], weights=per_node[busy])
            self._job_energy[:len(add)] += add
        self.idle_energy_j += float(per_node[~busy].sum())
        if self.lost.any() or self.mods.drop.any():
            unseen = self.lost | self.mods.drop[:, None]
            self.unseen_energy_j += float(e[unseen].sum())

    def frames(self) -> list:
        """The fleet's state now, as one frame per node (none from a silent node)."""
        self._seq += 1
        return build_frames(self, self._seq)


def _uuid(rng: np.random.Generator) -> str:
    h = rng.bytes(16).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
