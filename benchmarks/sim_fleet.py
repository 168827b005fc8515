"""Benchmark: the simulator alone, as ``fleetwatch evaluate`` and the energy report use it.

1. frames: GPUS (default 1,000, 8 per node) for HOURS (default 24) at 15 s with a
   labelled schedule of every fault kind in each of its modes (``--per-kind``),
   building every frame; prints frames/s and the seconds taken.
2. energy: the energy-only fast path (``step()`` without frames) for
   ``--energy-days`` (default 1) of the same fleet, with the ground truth per
   GPU and per job; prints steps/s and the projected seconds for 30 days.

Last line is JSON. Target (issue #11): 720,000 frames (1,000 GPUs, 24 h, 15 s)
well under 2 minutes on one core. Wall and CPU seconds are both printed: on a
shared machine the CPU seconds are the fairer figure.

    python benchmarks/sim_fleet.py [--gpus 1000] [--hours 24] [--energy-days 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from fleetwatch.collectors.sim import FleetSim, SimParams, random_schedule

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def frames_run(params: SimParams, hours: float, per_kind: int) -> dict[str, float]:
    faults = random_schedule(params, hours * 3600, seed=params.seed, per_kind=per_kind)
    sim = FleetSim(params, START, faults)
    steps = int(hours * 3600 / params.interval_s)
    frames = readings = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for k in range(steps):
        sim.step()
        out = sim.frames()
        frames += len(out)
        if k % 960 == 0:
            print(f"\r  frames: {k / steps:6.1%}", end="", file=sys.stderr)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    readings = frames * params.gpus
    shown = sum(r.first_faulty_ts is not None for r in sim.ground_truth)
    print(f"\r  frames: {frames:,} ({readings:,} GPU readings) in {seconds:.1f} s "
          f"({cpu:.1f} s CPU); "
          f"{len(faults)} faults, {shown} showed", file=sys.stderr)
    return {"frames": frames, "frames_s": seconds, "frames_cpu_s": cpu, "faults": len(faults),
            "faults_shown": shown}


def energy_run(params: SimParams, days: float) -> dict[str, float]:
    sim = FleetSim(params, START)
    steps = int(days * 86400 / params.interval_s)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        sim.step()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    by_job = sim.energy_by("job")
    assert abs(sum(by_job.values()) - sim.energy_j.sum()) <= 1e-6 * sim.energy_j.sum()
    print(f"  energy: {steps:,} steps in {seconds:.1f} s, {sim.energy_j.sum() / 3.6e9:.2f} MWh "
          f"over {len(by_job) - 1} jobs", file=sys.stderr)
    return {"energy_steps": steps, "energy_s": seconds, "energy_cpu_s": cpu,
            "energy_month_projected_s": seconds / days * 30}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--per-kind", type=int, default=2)
    parser.add_argument("--energy-days", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    params = SimParams(nodes=max(1, args.gpus // 8), gpus=8, nodes_per_rack=4, seed=args.seed)
    out = {"gpus": params.nodes * params.gpus, "hours": args.hours}
    out.update(frames_run(params, args.hours, args.per_kind))
    if args.energy_days > 0:
        out.update(energy_run(params, args.energy_days))
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
