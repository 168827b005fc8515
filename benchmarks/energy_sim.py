"""The benchmarks' month from the fleet simulator: its 15 s readings, a day at a time,
through the integrator's array path into a store's ledger, beside its ground truth.

The simulator's fast path (``step()`` without frames) advances the physics and
keeps, per GPU, the exact energy it drew (``energy_j``); after each step we read
what the agents would: board power (``power``), NVML's total energy counter
(``energy_counter_j``, J since the driver loaded) and the job each node runs.
Half the GPUs report the counter (the rest are integrated from power), and two
nodes reboot mid-month (their counters restart near 0), so both of the
integrator's paths and its reset handling are exercised. A GPU is idle when its
SM activity is under ``idle_sm_ratio``, as the processor decides.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.energy_arrays import integrate_arrays
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report_month import month_span

MONTH = "2022-05"
INTERVAL_S = 15.0
GPUS_PER_NODE = 8
STEPS_PER_DAY = int(86400 / INTERVAL_S)


@dataclass
class SimLedger:
    truth_j: float        # sim.energy_j summed over every GPU: the ground truth
    rows: int
    integrate_s: float    # integrate_arrays + store.write_energy
    simulate_s: float     # sim.step() and reading its arrays
    samples: int
    gpus: int
    days: float


def sim_month_ledger(store: SqliteStore, days: float, gpus: int, seed: int = 0) -> SimLedger:
    """Fill ``store``'s ledger with ``days`` of a simulated fleet of ``gpus`` GPUs from the
    start of MONTH; ``days`` may be a fraction (whole 15 s steps)."""
    start, _ = month_span(MONTH)
    nodes = max(1, gpus // GPUS_PER_NODE)
    sim = FleetSim(SimParams(nodes=nodes, gpus=GPUS_PER_NODE, nodes_per_rack=8, seed=seed,
                             interval_s=INTERVAL_S, cluster="sim"), start)
    n_g = nodes * GPUS_PER_NODE
    devices = [(sim.params.cluster, sim.rack_names[sim.rack_of[n]], sim.node_names[n],
                f"gpu{g}") for n in range(nodes) for g in range(GPUS_PER_NODE)]
    has_counter = (np.arange(n_g) % 2 == 0).reshape(nodes, GPUS_PER_NODE)
    total_steps = int(round(days * STEPS_PER_DAY))
    reboot_at = {total_steps // 3: 0, (2 * total_steps) // 3: nodes // 2}  # step -> node
    owners: list[tuple[str, str, str]] = [("", "", "")]
    owner_of: dict[int, int] = {}  # the simulator's job number -> index in owners
    settings = EnergySettings(tdp_w=400.0)  # the A100 SXM4's TDP (fleetwatch.parts)

    def sample() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What the agents read now, flattened to (G,): power, counter, idle, owner."""
        codes = np.zeros(nodes, np.int64)
        for n, num in enumerate(sim.jobs.num.tolist()):
            if num >= 0:
                if num not in owner_of:
                    job = sim.jobs.by_num[num]
                    owner_of[num] = len(owners)
                    owners.append((job.id, job.info["user"], job.info["team"]))
                codes[n] = owner_of[num]
        counter = np.where(has_counter, sim.energy_counter_j, np.nan)
        idle = sim.act["sm"] < settings.idle_sm_ratio
        return (sim.power.ravel().copy(), counter.ravel(), idle.ravel(),
                np.repeat(codes, GPUS_PER_NODE))

    simulate_s = integrate_s = 0.0
    rows_written = step = 0
    first = sample()
    ts_block, blocks = [sim.ts], [first]
    t_sim = time.perf_counter()
    while step < total_steps:
        step += 1
        if step in reboot_at:  # a driver reload: that node's counters restart near 0
            sim.reboot_node(reboot_at[step])
        sim.step()
        ts_block.append(sim.ts)
        blocks.append(sample())
        if len(ts_block) == STEPS_PER_DAY + 1 or step == total_steps:
            simulate_s += time.perf_counter() - t_sim
            power, counter, idle, owner = (np.stack(c) for c in zip(*blocks))
            t0 = time.perf_counter()
            rows = integrate_arrays(np.array(ts_block), power, counter, idle, owner,
                                    devices, owners, settings)
            store.write_energy(rows, [])
            integrate_s += time.perf_counter() - t0
            rows_written += len(rows)
            ts_block, blocks = [ts_block[-1]], [blocks[-1]]  # the last sample opens the next
            print(f"\r  simulated {step / STEPS_PER_DAY:.2f}/{days} d: {rows_written:,} "
                  f"ledger rows", end="", file=sys.stderr, flush=True)
            t_sim = time.perf_counter()
    print(file=sys.stderr)
    store.roll_up_energy(sim.ts + 3600)
    return SimLedger(float(sim.energy_j.sum()), rows_written, integrate_s, simulate_s,
                     total_steps * n_g, n_g, total_steps / STEPS_PER_DAY)
