"""Micro-benchmark: frames per CPU-second through the processor's energy integrator.

The simulated fleet's frames (8 GPUs, jobs, power, the energy counter, CPU power), in
batches as the processor hands them over (one frame per node per batch), integrated
as ``observe`` does, into a store that keeps nothing (the ledger rows are made, not
written: the store's cost is ``benchmarks/pipeline.py``'s).
Run it beside the same script on the code to compare with. Prints one JSON line.

    python benchmarks/energy_integrator.py [--nodes 250] [--batches 120]
"""

from __future__ import annotations

import argparse
import json
import time

from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.pipeline.energy import EnergyIntegrator


class NullStore:
    """Takes the rows and keeps nothing; has no saved state to reload."""

    def write_energy(self, rows: object, states: object) -> None:
        pass

    def energy_state(self, cluster: str, node: str, ts: float) -> tuple[list, list]:
        return [], []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=250)
    ap.add_argument("--batches", type=int, default=120)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sim = FleetSim(SimParams(nodes=args.nodes, gpus=8, nodes_per_rack=8, interval_s=15.0),
                   1.7e9)
    batches = []
    for _ in range(args.batches):
        sim.step()
        batches.append(sim.frames())
    best = float("inf")
    for _ in range(args.repeats):
        integrator = EnergyIntegrator(NullStore())  # type: ignore[arg-type]
        t0 = time.process_time()
        for frames in batches:
            integrator.observe(frames)
        best = min(best, time.process_time() - t0)
    n = sum(map(len, batches))
    print(json.dumps({"cpu": "process time, best of repeats", "frames": n,
                      "frames_per_batch": args.nodes, "us_per_frame": round(1e6 * best / n, 1),
                      "frames_per_s": round(n / best)}))


if __name__ == "__main__":
    main()
