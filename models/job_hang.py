"""A whole job hung: every GPU of a job on a node blocked in a collective, moving no data.

The commonest failure of large training jobs besides the hardware's: a rank dies, two
ranks deadlock or the network partitions, and every other rank waits in an NCCL
collective until NCCL's watchdog kills the job (PyTorch's default timeout: 10 minutes;
many sites set 30 to 60). Meanwhile each GPU of the job shows the same signature: an
NCCL kernel resident (``gpu_util_pct`` ~100) spinning on a few SMs (SM activity low and
flat: a few channels of 108 to 132 SMs; no tensor-pipe work), power a little above
idle, and, what sets it apart from a healthy exposed all-reduce, which looks the same
on those counters, no bytes moving: NVLink (``gpu_nvlink_tx/rx_bytes_total``, or
``gpu_nvlink_raw_bytes_total``, counters turned into rates here), PCIe
(``gpu_pcie_tx/rx_bytes_per_s``: GPUDirect RDMA to the node's NICs crosses it too) and
the node's InfiniBand ports (``ib_tx/rx_bytes_per_s``) all near 0, where a healthy
all-reduce moves GB/s. A checkpoint or an input stall has no kernel resident most of
the time; a compute phase has busy SMs and tensor pipes: neither is a hang.

A node is judged per job: ``job_hung`` when every GPU of the job on it (two or more:
a collective needs peers) shows the signature, and none moves more than
``IDLE_BYTES_PER_S``, for ``detectors.job_hang_s`` (5 minutes by default: far over a
healthy step or all-reduce, which last seconds, and under NCCL's default 10-minute
timeout). Where a GPU of the job has no byte counter at all (no NVLink counter rate
and no PCIe throughput), the node's job is not judged: without bytes a hang and a long
communication-bound phase look the same, and a page on a healthy job is worse than the
NCCL watchdog's own error. A counter's first reading gives no rate, so the first
sample of a node is not judged either.

One GPU stuck while its job peers work is ``gpu_stuck``'s (``fleetwatch.models.jobs``):
here every GPU of the job must show the signature, so the two never judge the same
sample. A job hung on several nodes is one ``job_hung`` finding, on the node where it
was found hung first (the first by name among equals), naming the job's other hung
nodes: one alert per job, whose message grows as its nodes are found. A processor sees
only the nodes of its partitions, so with several processors a job is one alert per
processor; Alertmanager groups ``job_hung`` by cluster (deploy/alertmanager/alertmanager.yml).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models import Finding
from fleetwatch.models.batch import COL, Batch, columns, job_code
from fleetwatch.models.held_jobs import node_job_tags
from fleetwatch.models.jobs import RESIDENT_UTIL_PCT

SM, UTIL, POWER, LIMIT = (COL["gpu_sm_active_ratio"], COL["gpu_util_pct"], COL["gpu_power_w"],
                          COL["gpu_power_limit_w"])
# NCCL spins on one SM per channel: at most 32 channels of an A100's 108 SMs (0.30) or an
# H100's 132 (0.24). A GPU that computes keeps far more of them active.
HUNG_SM_MAX = 0.35
HUNG_TENSOR_MAX = 0.05
# A spinning kernel draws a little over the clocked-idle power (A100 ~100 W of 400-500,
# H100 ~150 W of 700); a GPU above this share of its limit is doing work.
HUNG_POWER_FRAC = 0.4
# Bytes a second (all links, both directions) that count as none: a healthy all-reduce
# moves tens to hundreds of GB/s over NVLink and GB/s over PCIe and InfiniBand; a blocked
# rank moves at most the driver's and the monitoring's few MB/s.
IDLE_BYTES_PER_S = 100e6
NVLINK_DATA = ("gpu_nvlink_tx_bytes_total", "gpu_nvlink_rx_bytes_total")
NVLINK_RAW = "gpu_nvlink_raw_bytes_total"
PCIE = ("gpu_pcie_tx_bytes_per_s", "gpu_pcie_rx_bytes_per_s")
IB = ("ib_tx_bytes_per_s", "ib_rx_bytes_per_s")
# A rank of the job seen this recently outside the hung signature, on another node, holding
# GPU memory (a process with its model on it): the waiting ranks wait for it.
ALIVE_RECENT_S = 120.0
ALIVE_FB_BYTES = 1 << 30   # a CUDA context alone holds ~0.5 GiB; a training rank tens of GiB
# A GPU whose SM activity is at most this share of its job peers' median on the node (all of
# them in the signature) is named in the alert: a real hung H100 kernel spun on 6% of the
# SMs, NCCL's waiting ranks on 12%.
OUTLIER_SM_SHARE = 0.75

GpuKey = tuple[str, str, int]       # (cluster, node, GPU index)
JobKey = tuple[str, str, str]       # (cluster, node, job)


class JobHang:
    name = "job_hang"
    rules = {"job_hung": ("gpu_util_pct",), "job_waiting": ("gpu_util_pct",)}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        # The last NVLink counter reading of each GPU that showed the signature: (ts, bytes).
        self._links: dict[GpuKey, tuple[float, float]] = {}
        # When each node's job first showed the hung signature, moving no bytes.
        self._since: dict[JobKey, float] = {}
        # Per (cluster, job) of a waiting job: when a GPU of it last showed a rank at work or
        # stalled on its host (outside the signature, memory held), and where: (ts, node, GPU).
        # (ts, node, GPU, its utilization, its memory used or None)
        self._alive: dict[tuple[str, str], tuple[float, str, int, float, float | None]] = {}
        # Per (cluster, job): the nodes on which it was last judged hung, and since when.
        self._hung: dict[tuple[str, str], dict[str, float]] = {}

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        self._links = {k: v for k, v in self._links.items() if k[1] not in gone}
        self._since = {k: v for k, v in self._since.items() if k[1] not in gone}
        self._alive = {k: v for k, v in self._alive.items() if v[1] not in gone}
        for nodes in self._hung.values():
            for n in gone & nodes.keys():
                del nodes[n]

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        b = columns(frames)
        if not b.frames:
            return []
        signature = self._signature(b)
        # Only frames with a GPU showing the signature, or of a node whose job was hung (to
        # see it end): most frames are neither, and cost nothing more here.
        judged = signature.any(axis=1)
        if self._since or judged.any():
            self._note_alive(b, signature)
        if self._since:
            watched = {k[:2] for k in self._since}
            judged |= np.fromiter(((f.cluster, f.node) in watched for f in b.frames), bool,
                                  len(b.frames))
        out: list[Finding] = []
        for rows in b.waves:
            for r in rows[judged[rows]].tolist():
                out.extend(self._judge(b, r, signature[r]))
        return out

    def _note_alive(self, b: Batch, signature: np.ndarray) -> None:
        """Remember, for the jobs that wait here, where a rank last showed outside the
        signature: computing, copying, or holding its memory with no kernel (a checkpoint
        written from the host, a debugger, an input stall). A GPU whose memory is freed (its
        process gone: a rank that died) is not such a rank."""
        codes = {int(c) for c in np.unique(b.job[signature])}
        codes |= {job_code(k[2]) for k in self._since}
        codes.discard(-1)
        if not codes:
            return
        alive = (b.job >= 0) & ~b.lost & ~signature & np.isin(b.job, list(codes))
        for r, j in zip(*np.nonzero(alive)):
            f = b.frames[int(r)]
            g = f.gpus[int(j)]
            fb = g.metrics.get("gpu_fb_used_bytes")
            util = g.metrics.get("gpu_util_pct", 0.0)
            # Memory held says a process is there, kernel or not; without a memory reading,
            # only a kernel that ran does (an idle GPU might be a rank that died).
            if not (fb >= ALIVE_FB_BYTES if fb is not None else util > 0):
                continue
            key = (f.cluster, g.job or "")
            seen = self._alive.get(key)
            if seen is None or f.ts >= seen[0]:
                self._alive[key] = (f.ts, f.node, g.index, util, fb)
        if len(self._alive) > 4096:
            newest = max(v[0] for v in self._alive.values())
            self._alive = {k: v for k, v in self._alive.items()
                           if v[0] >= newest - ALIVE_RECENT_S}

    def _signature(self, b: Batch) -> np.ndarray:
        """(F, G): a GPU in a job with a kernel resident on few SMs, at low power."""
        x = b.x
        with np.errstate(invalid="ignore"):
            sm = x[..., SM]
            low_sm = ~(sm > HUNG_SM_MAX)  # absent (no GPM / profiling): bytes decide
            power, limit = x[..., POWER], x[..., LIMIT]
            low_power = ~(power > HUNG_POWER_FRAC * limit)
            return ((b.job >= 0) & ~b.lost & (x[..., UTIL] >= RESIDENT_UTIL_PCT) & low_sm
                    & low_power)

    def _judge(self, b: Batch, r: int, signature: np.ndarray) -> list[Finding]:
        f = b.frames[r]
        # A lost GPU (gone with an XID 79: often why the others wait) is not one of them.
        codes = np.where(b.lost[r], -1, b.job[r])
        hung: list[tuple[str, float, dict[str, float]]] = []
        waiting: list[Finding] = []
        jobs = {f.gpus[j].job for j in np.flatnonzero(codes >= 0).tolist()}
        for key in [k for k in self._since if k[:2] == (f.cluster, f.node) and k[2] not in jobs]:
            del self._since[key]  # the job ended or moved: its wait ended with it
        for code in sorted(set(codes[codes >= 0].tolist())):
            js = np.flatnonzero(codes == code)
            job = f.gpus[int(js[0])].job or ""
            key = (f.cluster, f.node, job)
            if len(js) < 2 or not signature[js].all():
                self._since.pop(key, None)
                continue
            moved = self._moved(f, [f.gpus[int(j)] for j in js])
            if moved is None:
                self._since.pop(key, None)
                continue
            since = self._since.setdefault(key, f.ts)
            x = b.x[r, js]
            ev = {"gpus": float(len(js)), "util_pct": float(np.nanmedian(x[:, UTIL])),
                  **moved, "hung_s": f.ts - since}
            sm = x[:, SM]
            if np.isfinite(sm).any():
                ev["sm_active"] = float(np.nanmedian(sm))
                low = int(np.nanargmin(sm))
                if sm[low] <= OUTLIER_SM_SHARE * ev["sm_active"]:
                    # One kernel spinning on fewer SMs than the others' NCCL waits: where a
                    # hang started is often the odd one out.
                    ev["lowest_sm_gpu"] = float(f.gpus[int(js[low])].index)
                    ev["lowest_sm_active"] = float(sm[low])
            if np.isfinite(x[:, POWER]).any():
                ev["power_w"] = float(np.nanmedian(x[:, POWER]))
            live = self._alive.get((f.cluster, job))
            if live is not None and live[1] != f.node and live[0] >= f.ts - ALIVE_RECENT_S:
                waiting.append(self._waiting(f, job, ev, live))
            else:
                hung.append((job, since, ev))
        for nodes in self._hung.values():
            nodes.pop(f.node, None)
        for job, since, _ in hung:
            self._hung.setdefault((f.cluster, job), {})[f.node] = since
        self._hung = {k: v for k, v in self._hung.items() if v}
        # A job hung on several nodes is told by its first node only.
        hung = [h for h in hung if self._lead(f.cluster, h[0]) == f.node]
        if not hung:
            return waiting
        hung.sort(key=lambda h: h[1])
        return [self._finding(f, hung), *waiting]

    def _lead(self, cluster: str, job: str) -> str:
        """The node that tells of a hung job: hung first, the first by name among equals."""
        nodes = self._hung[(cluster, job)]
        return min(nodes, key=lambda n: (nodes[n], n))

    def _waiting(self, f: Frame, job: str, ev: dict[str, float],
                 live: tuple[float, str, int, float, float | None]) -> Finding:
        """The job's GPUs here wait in a collective for a rank on another node that is not
        in one: it computes, copies, or holds its memory with no kernel (a checkpoint
        written from the host, a debugger, an input stall, or a host-side deadlock). Only
        how long tells those apart: a warning after ``job_wait_s``."""
        node, gpu, util, fb = live[1], live[2], live[3], live[4]
        ev = {**ev, "waiting_for_gpu": float(gpu), "waiting_for_seen_s": f.ts - live[0],
              "waiting_for_util_pct": util}
        if fb is not None:
            ev["waiting_for_fb_used_bytes"] = fb
        doing = (f"a kernel resident {util:.0f}% of the time" if util > 0 else
                 f"no kernel, {fb / 2**30:.1f} GiB of its memory held" if fb is not None
                 else "no kernel")
        message = (f"job {job} on {f.node}: its {ev['gpus']:.0f} GPUs have waited in a "
                   f"collective for {ev['hung_s']:.0f} s, moving no data, while GPU {gpu} on "
                   f"{node} of the same job is not in one ({doing}): that rank is busy "
                   "elsewhere or stalled on its host")
        return Finding(
            "job_waiting", f.cluster, f.rack, f.node, None, f.ts, ev["hung_s"], message,
            "warning", self.c.job_wait_s, 0.0, {k: round(v, 3) for k, v in ev.items()},
            f"If no checkpoint or debugging session of job {job} is under way on {node}, "
            f"dump the stack of the rank on GPU {gpu} there (py-spy dump --pid PID): a "
            "data-loader or host-side deadlock holds every other rank; then cancel the job "
            "and restart it from its last checkpoint", "node", **node_job_tags(f, [job]))

    def _moved(self, f: Frame, gpus: list[GpuReading]) -> dict[str, float] | None:
        """The most bytes/s any of these GPUs moves (NVLink and PCIe, all directions) and
        the node's InfiniBand ports; None if one moves data or one has no byte reading."""
        # Every GPU's NVLink reading is kept first, so that the next sample has rates.
        rates = [self._nvlink_rate(f, g.index, g.metrics) for g in gpus]
        most = 0.0
        for g, rate in zip(gpus, rates):
            m = g.metrics
            if m.get("gpu_tensor_active_ratio", 0.0) > HUNG_TENSOR_MAX:
                return None
            pcie = [m[k] for k in PCIE if k in m]
            # A GPU with NVLink counters needs their rate (PCIe does not see NVLink's
            # traffic); one without (a PCIe card) is judged by PCIe alone.
            if (rate is None and (not pcie or _has_nvlink(m))):
                return None
            moved = (rate or 0.0) + sum(pcie)
            if moved > IDLE_BYTES_PER_S:
                return None
            most = max(most, moved)
        out = {"moved_bytes_per_s": most}
        ib = []
        for p in f.host.ports:
            if p.kind != "ib" or not any(k in p.metrics for k in IB):
                continue
            moved = sum(p.metrics.get(k, 0.0) for k in IB)
            if moved > IDLE_BYTES_PER_S:
                return None
            # A direction with no rate (a saturated 32-bit counter) is unknown, not idle.
            if p.metrics.get("ib_port_active", 1.0) and not all(k in p.metrics for k in IB):
                return None
            ib.append(moved)
        if ib:
            out["ib_bytes_per_s"] = max(ib)
        return out

    def _nvlink_rate(self, f: Frame, index: int, m: Mapping[str, float]) -> float | None:
        """NVLink bytes/s since this GPU's previous reading (data counters, else raw);
        None without a counter, on its first reading, or after a counter reset."""
        if not _has_nvlink(m):
            return None
        if all(k in m for k in NVLINK_DATA):
            total = m[NVLINK_DATA[0]] + m[NVLINK_DATA[1]]
        else:
            total = m[NVLINK_RAW]
        key = (f.cluster, f.node, index)
        prev = self._links.get(key)
        if prev is not None and prev[0] >= f.ts:
            return None  # a late or repeated frame: judged already
        self._links[key] = (f.ts, total)
        if prev is None or total < prev[1]:
            return None
        return (total - prev[1]) / (f.ts - prev[0])

    def _finding(self, f: Frame, hung: list[tuple[str, float, dict[str, float]]]) -> Finding:
        job, _, ev = hung[0]
        jobs = f"job {job}" + (f" (and {', '.join(h[0] for h in hung[1:])})" if hung[1:] else "")
        sm = f" on few SMs ({ev['sm_active']:.0%} SM activity)" if "sm_active" in ev else ""
        ib = f", InfiniBand {ev['ib_bytes_per_s'] / 1e6:.1f} MB/s" if "ib_bytes_per_s" in ev else ""
        odd = (f"; GPU {ev['lowest_sm_gpu']:.0f} spins on the fewest SMs "
               f"({ev['lowest_sm_active']:.0%}): look at its rank first"
               if "lowest_sm_gpu" in ev else "")
        others = sorted(n for n in self._hung.get((f.cluster, job), {}) if n != f.node)
        also = (f"; also hung on {', '.join(others)} ({len(others) + 1} nodes)"
                if others else "")
        if others:
            ev = {**ev, "job_nodes": float(len(others) + 1)}
        message = (f"{jobs} hung on {f.node}: its {ev['gpus']:.0f} GPUs have a kernel resident "
                   f"({ev['util_pct']:.0f}% utilization){sm} and move no data (at most "
                   f"{ev['moved_bytes_per_s'] / 1e6:.1f} MB/s over NVLink and PCIe{ib}) "
                   f"for {ev['hung_s']:.0f} s{odd}{also}")
        return Finding(
            "job_hung", f.cluster, f.rack, f.node, None, f.ts, ev["hung_s"], message,
            "critical", self.c.job_hang_s, 0.0,
            {k: round(v, 3) for k, v in ev.items()},
            "Every rank is blocked in a collective: dump the stacks of the job's processes "
            "(py-spy dump --pid PID on each rank), find the rank that died or stalled first "
            "in the NCCL logs (NCCL_DEBUG=INFO; a lost GPU, an XID, a node gone silent), then "
            "cancel the job and restart it from its last checkpoint", "node",
            **node_job_tags(f, [h[0] for h in hung]))


def _has_nvlink(m: Mapping[str, float]) -> bool:
    return all(k in m for k in NVLINK_DATA) or NVLINK_RAW in m
