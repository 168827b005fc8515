"""The simulated fleet's state as ``Frame``s: what the agent would send from each node.

Only metrics an A100 reports over NVML/DCGM are present (no fan on SXM, no
retired pages on Ampere); a GPU that fell off the bus is ``lost`` with no
metrics; a silent node sends nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fleetwatch.collectors.sim import hardware as hw
from fleetwatch.frame import Frame, GpuReading, HostReading, gpu_reading

if TYPE_CHECKING:
    from fleetwatch.collectors.sim.fleet import FleetSim

_NO_INFO: dict[str, str] = {}
_COUNTER_METRICS = (
    ("gpu_pcie_replay_total", "pcie"),
    ("gpu_nvlink_crc_errors_total", "crc"),
    ("gpu_nvlink_replay_errors_total", "replay"),
    ("gpu_nvlink_recovery_errors_total", "recovery"),
    ("gpu_nvlink_links_down", "links_down"),
    ("gpu_ecc_sbe_volatile_total", "sbe_vol"),
    ("gpu_ecc_dbe_volatile_total", "dbe_vol"),
    ("gpu_ecc_sbe_aggregate_total", "sbe_agg"),
    ("gpu_ecc_dbe_aggregate_total", "dbe_agg"),
    ("gpu_remapped_rows_correctable", "rows_corr"),
    ("gpu_remapped_rows_uncorrectable", "rows_unc"),
    ("gpu_row_remap_pending", "remap_pending"),
    ("gpu_row_remap_failure", "remap_failure"),
)


def gpu_columns(sim: FleetSim) -> dict[str, np.ndarray]:
    """Every GPU metric as an (nodes, gpus) array, keyed by its catalogue name."""
    a, shape, pt = sim.act, sim.temp.shape, sim.part
    # A job allocates its share of HBM (PyTorch's caching allocator holds it all
    # job long); an idle GPU holds a few MiB of driver context.
    fb_used = np.where(sim.jobs.busy, sim.jobs.fb_frac * (pt.fb_total - pt.fb_reserved),
                       4 * hw.MIB).round()[:, None]
    cols: dict[str, np.ndarray] = {
        "gpu_util_pct": a["util"],
        "gpu_mem_copy_util_pct": (a["dram"] * 92.0).round(),
        "gpu_sm_active_ratio": a["sm"],
        "gpu_sm_occupancy_ratio": a["occ"],
        "gpu_tensor_active_ratio": a["tensor"],
        "gpu_dram_active_ratio": a["dram"],
        "gpu_fb_used_bytes": np.broadcast_to(fb_used, shape),
        "gpu_fb_free_bytes": np.broadcast_to(pt.fb_total - pt.fb_reserved - fb_used, shape),
        "gpu_fb_total_bytes": np.full(shape, float(pt.fb_total)),
        "gpu_power_w": sim.power.round(2),
        "gpu_power_limit_w": sim.limit,
        "gpu_energy_j": (sim.energy_base + sim.energy_j).round(3),
        "gpu_temp_c": np.round(sim.temp_read),
        "gpu_mem_temp_c": sim.mem_temp.round(),
        "gpu_slowdown_temp_c": np.full(shape, pt.slowdown_c),
        "gpu_shutdown_temp_c": np.full(shape, pt.shutdown_c),
        "gpu_sm_clock_mhz": sim.clock,
        "gpu_mem_clock_mhz": np.full(shape, pt.mem_clock),
        "gpu_throttle_reasons": sim.flags,
        "gpu_nvlink_tx_bytes_total": sim.nvlink_tx,
        "gpu_nvlink_rx_bytes_total": sim.nvlink_rx,
        "gpu_pcie_tx_bytes_per_s": sim.pcie_tx,
        "gpu_pcie_rx_bytes_per_s": sim.pcie_rx,
    }
    for name, key in _COUNTER_METRICS:
        cols[name] = sim.counters[key]
    return cols


def build_frames(sim: FleetSim, seq: int) -> list[Frame]:
    p = sim.params
    cols = gpu_columns(sim)
    names = list(cols)
    # One tuple of values per GPU (node-major), from one flat list per metric: cheaper
    # than a nested tolist(); one dict(zip()) per GPU is then the cheap way in.
    shape = sim.temp.shape
    table = list(zip(*[np.broadcast_to(c, shape).ravel().tolist() for c in cols.values()]))
    g = shape[1]
    busy = sim.jobs.busy
    host_mem = np.where(busy, 0.35 + 0.3 * sim.jobs.fb_frac, 0.04) * hw.HOST_MEM_TOTAL
    host_rows = np.stack([sim.host_cpu.round(1), sim.inlet.round(2), host_mem.round(),
                          (hw.HOST_CPU_IDLE_W + hw.HOST_CPU_W_PER_PCT * sim.host_cpu).round(1)],
                         axis=-1).tolist()
    lost_any = sim.lost.any()
    xids = sim.mods.xids
    drop = sim.mods.drop
    ts, cluster, model = sim.ts, p.cluster, sim.part.model
    by_num = sim.jobs.by_num
    frames = []
    for i, num in enumerate(sim.jobs.num.tolist()):
        if drop[i]:
            continue
        if num >= 0:
            job_obj = by_num[num]
            job, info = job_obj.id, job_obj.info
        else:
            job, info = None, _NO_INFO
        gpus = [gpu_reading(j, uuid, model, dict(zip(names, row)), job, "ok", (), info)
                for j, uuid, row in zip(range(g), sim.uuids[i], table[i * g:(i + 1) * g])]
        if lost_any and sim.lost[i].any():
            for j in np.flatnonzero(sim.lost[i]).tolist():
                gpus[j] = GpuReading(j, sim.uuids[i][j], model, {}, None, "lost", (), _NO_INFO)
        if xids:
            for (xi, xj), codes in xids.items():
                if xi == i:
                    r = gpus[xj]
                    gpus[xj] = GpuReading(r.index, r.uuid, r.model, r.metrics, r.job, r.state,
                                          codes, r.info)
        cpu, inlet, mem_used, cpu_w = host_rows[i]
        host = HostReading({"host_cpu_util_pct": cpu, "host_inlet_temp_c": inlet,
                            "host_mem_total_bytes": hw.HOST_MEM_TOTAL,
                            "host_mem_used_bytes": mem_used, "host_cpu_power_w": cpu_w})
        frames.append(Frame(cluster, sim.rack_names[sim.rack_of[i]], sim.node_names[i], ts,
                            tuple(gpus), host, seq=seq))
    return frames


def gpu_samples(sim: FleetSim, names: Sequence[str]
                ) -> tuple[list[tuple[str, str, str, int]], dict[str, np.ndarray], np.ndarray]:
    """What ``build_frames`` would send now, as arrays, without building a frame: the
    (cluster, rack, node, GPU index) of every GPU in a frame, each metric of ``names``
    per such GPU (NaN where its reading lacks it: a lost GPU, a metric the part has
    not), and its node's inlet sensor. For code that reads whole fleets of samples (a
    model's training history), where the frames would cost more than the rest."""
    p = sim.params
    cols = gpu_columns(sim)
    shape = sim.temp.shape
    sent = ~np.asarray(sim.mods.drop, bool)
    nodes = np.flatnonzero(sent)
    idents = [(p.cluster, sim.rack_names[sim.rack_of[i]], sim.node_names[i], j)
              for i in nodes.tolist() for j in range(shape[1])]
    lost = sim.lost[nodes].ravel()
    values = {}
    for name in names:
        col = cols.get(name)
        if col is None:
            values[name] = np.full(len(idents), math.nan)
            continue
        v = np.array(np.broadcast_to(col, shape)[nodes], float).ravel()
        v[lost] = math.nan
        values[name] = v
    inlet = np.repeat(sim.inlet.round(2)[nodes], shape[1])
    return idents, values, inlet
