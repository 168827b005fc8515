"""Micro-benchmark: frames per second through every detector, against the one old rule.

Frames are shaped like the agent's: 8 GPUs, ~40 metrics each (the simulator's
readings plus the counters and limits NVML reports), in batches as the
processor hands them over (one frame per node per batch, ``--nodes`` nodes).
Prints one JSON line.

    python benchmarks/detectors.py [--nodes 500] [--batches 60]
"""

from __future__ import annotations

import argparse
import json
import time

from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.registry import build
from fleetwatch.models.rules import GpuTemperatureLimit

EXTRA = {
    "gpu_mem_copy_util_pct": 30.0, "gpu_sm_occupancy_ratio": 0.4, "gpu_dram_active_ratio": 0.3,
    "gpu_fb_free_bytes": 8e9, "gpu_fb_total_bytes": 8.5e10, "gpu_power_limit_w": 500.0,
    "gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0, "gpu_fan_pct": 0.0,
    "gpu_pcie_tx_bytes_per_s": 1e9, "gpu_pcie_rx_bytes_per_s": 1e9,
    "gpu_pcie_replay_total": 3.0, "gpu_nvlink_tx_bytes_total": 1e14,
    "gpu_nvlink_rx_bytes_total": 1e14, "gpu_nvlink_crc_errors_total": 0.0,
    "gpu_nvlink_replay_errors_total": 0.0, "gpu_nvlink_recovery_errors_total": 0.0,
    "gpu_nvlink_links_down": 0.0, "gpu_ecc_sbe_volatile_total": 2.0,
    "gpu_ecc_dbe_volatile_total": 0.0, "gpu_ecc_sbe_aggregate_total": 10.0,
    "gpu_ecc_dbe_aggregate_total": 0.0, "gpu_remapped_rows_correctable": 1.0,
    "gpu_remapped_rows_uncorrectable": 0.0, "gpu_row_remap_pending": 0.0,
    "gpu_row_remap_failure": 0.0, "gpu_fb_reserved_bytes": 5e8, "gpu_gr_engine_active_ratio": 0.9,
    "gpu_enc_util_pct": 0.0, "gpu_dec_util_pct": 0.0,
}


def agent_like(frames: list[Frame]) -> list[Frame]:
    return [Frame(f.cluster, f.rack, f.node, f.ts, tuple(
        GpuReading(g.index, g.uuid, g.model, {**g.metrics, **EXTRA}, g.job) for g in f.gpus),
        f.host, f.seq) for f in frames]


def run(detectors: list, batches: list[list[Frame]]) -> float:
    """Frames per CPU-second of this process (the machine may be shared: wall time lies)."""
    t0 = time.process_time()
    for frames in batches:
        for d in detectors:
            d.update(frames)
    return sum(map(len, batches)) / (time.process_time() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--batches", type=int, default=60)
    args = ap.parse_args()
    sim = FleetSim(SimParams(nodes=args.nodes, gpus=8, nodes_per_rack=8, interval_s=5.0), 1.7e9)
    batches = []
    for _ in range(args.batches):
        sim.step()
        batches.append(agent_like(sim.frames()))
    metrics = len(batches[0][0].gpus[0].metrics)
    detectors = build(DetectorsConfig())
    run(detectors, batches[:5])      # warm: slots assigned, per-node readers built
    all_on = run(detectors, batches[5:])
    one_rule = run([GpuTemperatureLimit()], batches[5:])
    print(json.dumps({"cpu": "process time", "frames_per_s_all_detectors": round(all_on),
                      "frames_per_s_one_rule": round(one_rule), "gpus_per_frame": 8,
                      "metrics_per_gpu": metrics, "frames_per_batch": args.nodes,
                      "us_per_frame_all": round(1e6 / all_on, 1),
                      "us_per_frame_one_rule": round(1e6 / one_rule, 1)}))


if __name__ == "__main__":
    main()
