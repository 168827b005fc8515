"""A GPU against the other GPUs of its job on the same node: stuck, straggling, under-powered.

In data-parallel training the GPUs of a job step in lockstep, so they show the
same SM activity, clocks and power through every phase; one that does not is
holding the whole job back. Only GPUs with a job and at least one job peer on
the node are judged. SM activity is ``gpu_sm_active_ratio`` where the GPU has
GPM (Hopper and newer), else ``gpu_util_pct`` / 100. Activity is a share, alike on
every part; clocks, power and power limits are not (an A100 tops out at 1410 MHz and a
400-500 W limit, an H100 at 1980 MHz and 700 W), so on a node that mixes parts in one job
those are compared only with job peers of the same model (the frame's model name).

Stuck: a GPU whose SM activity is at most ``stuck_activity`` while the median of
its job peers' is at least ``busy_activity`` (0.3 by default): it does not work
while they do. A GPU with a hung kernel (one resident the whole sample, utilization
~100%, with no SM working) is stuck at a lower line, while its peers' median is at
least ``stuck_peers_activity`` (0.1): a job whose compute runs at 20% SM activity (a
small model, a pipeline stage) has its hung GPU caught too. Below that line the
peers are not computing (an exposed all-reduce keeps NCCL kernels resident on a few
SMs; a checkpoint, an input stall or an idle job less), and a GPU near 0% among
them, hung signature or not, is in the same phase: the signature is never enough
on its own. A GPU found stuck stays stuck while it keeps that hung
signature, whatever phase its peers move on to (a hang does not end with the
peers' all-reduce), until it works again. A whole job hung (every rank blocked in a collective)
is ``models/job_hang.py``'s: it moves no bytes, where a long all-reduce does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.batch import (
    COL,
    Batch,
    columns,
    flagged,
    gpu_finding,
    parts,
    throttle_bits,
)
from fleetwatch.models.gpu_slots import Boards
from fleetwatch.models.held_jobs import job_tags, job_words
from fleetwatch.models.peer_stats import peer_median, same_job_peers

SM, UTIL, CLOCK, POWER, LIMIT = (COL["gpu_sm_active_ratio"], COL["gpu_util_pct"],
                                 COL["gpu_sm_clock_mhz"], COL["gpu_power_w"],
                                 COL["gpu_power_limit_w"])
TENSOR, DRAM = COL["gpu_tensor_active_ratio"], COL["gpu_dram_active_ratio"]
THROTTLE = COL["gpu_throttle_reasons"]
SW_POWER_CAP = THROTTLE_FLAGS["sw_power_cap"]
# Below this share of its power limit, and not capped, a GPU that computes runs at its boost
# clock (GPU Boost lowers it only to stay under the limit, or for heat).
UNCAPPED_POWER_FRAC = 0.9
# Utilization (the share of the sample with a kernel resident) at or above this: a kernel
# resident nearly the whole sample. With no SM activity, a hung kernel; in a light phase, a
# GPU that holds its clock up like its peers.
RESIDENT_UTIL_PCT = 90.0
BUSY_POWER_W = 100.0  # peers drawing less than this are not working hard enough to compare
# A hung kernel as a real H100 read it (tests/data/recorded/h100_phases.jsonl.gz): resident
# the whole sample, SM activity the share of SMs its blocks sit on (8 blocks: 0.06 of 132;
# an NCCL collective spins one block per channel, up to 32), no tensor-core work and DRAM
# as at idle (6e-6). Any kernel that moves data keeps DRAM far above that (copies 0.9,
# matrix products 0.25, an all-reduce its buffers). Where DRAM and tensor activity are read
# (GPM, DCGM profiling), a resident kernel on at most HUNG_SM_MAX of the SMs with neither
# is hung; without them, only SM activity at ``stuck_activity`` or below says so.
HUNG_SM_MAX = 0.3        # 32 blocks on an A100's 108 SMs
HUNG_DRAM_MAX = 0.005
HUNG_TENSOR_MAX = 0.001
# Pipeline stages of one job run seconds apart: at each change of phase (compute to
# all-reduce, every 30 s in some jobs) a stage ahead of its peers draws the next phase's
# power for a sample or so; a GPU that touches its power cap for a sample has its clock
# cut for that sample. A GPU is a candidate for gpu_power_low_vs_peers or gpu_straggler
# only once it has stayed low or slow over samples this far apart (its for-duration still
# counts from the first of them), so such moments raise no pending alert at all.
SETTLE_S = 10.0


GpuKey = tuple[str, str, int, str | None]  # (cluster, node, GPU index, job)


class JobPeers:
    name = "job_peers"
    rules = {"gpu_stuck": ("gpu_util_pct",),
             "gpu_straggler": ("gpu_util_pct",),
             "gpu_power_low_vs_peers": ("gpu_power_w",),
             "gpu_power_limit_low": ("gpu_power_limit_w",)}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        # GPUs (cluster, node, index, job) found stuck and still showing a hung kernel.
        self._hung: set[GpuKey] = set()
        self._boards = Boards()
        # Per rule, GPUs slow or drawing little against their job peers: since when, and
        # when that was first long enough to say so (SETTLE_S).
        self._since: dict[str, dict[GpuKey, tuple[float, float | None]]] = {
            "gpu_straggler": {}, "gpu_power_low_vs_peers": {}}

    def drop(self, nodes: Iterable[str]) -> None:
        """Forget the stuck GPUs of ``nodes``; otherwise every frame is judged on its own
        and the for-durations do the rest."""
        gone = set(nodes)
        self._boards.drop(gone)
        self._hung = {k for k in self._hung if k[1] not in gone}
        for rule, since in self._since.items():
            self._since[rule] = {k: v for k, v in since.items() if k[1] not in gone}

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        b = columns(frames)
        if not b.frames:
            return []
        replaced = self._boards.replaced(b)
        if replaced:  # a new board in a slot was not found stuck, slow or low
            new = {(f.cluster, f.node, b.gpu_ids[r][m.position])
                   for r, m in replaced if not m.back for f in (b.frames[r],)}
            self._hung = {k for k in self._hung if k[:3] not in new}
            for rule, since in self._since.items():
                self._since[rule] = {k: v for k, v in since.items() if k[:3] not in new}
        out = self._limits(b)
        rows = np.flatnonzero((b.job >= 0).any(axis=1))
        if len(rows):
            out += self._judge(b, rows)
        return out

    def _limits(self, b: Batch) -> list[Finding]:
        """An enforced power limit far below the node's other GPUs of its model: a cap or
        brake set on it.

        GPUs of one model on a node share a default limit and a power budget, so one held
        to a much lower limit (a power brake, a mistaken nvidia-smi -pl, a failing supply)
        will straggle. A node that mixes parts (a 400 W A100 beside 700 W H100s) compares
        each with its own part only.
        """
        limit = b.x[..., LIMIT]
        have = np.isfinite(limit) & ~b.lost
        if not have.any():
            return []
        g = limit.shape[1]
        part = parts(b.model)
        peers = have[:, None, :] & have[:, :, None] & ~np.eye(g, dtype=bool)[None] \
            & (part[:, :, None] == part[:, None, :])
        med, n = peer_median(limit, peers)
        with np.errstate(invalid="ignore"):
            low = have & (n >= 1) & (limit < self.c.power_low_frac * med)
        out = []
        for i, j in flagged(low):
            f = b.frames[i]
            gi = f.gpus[j].index
            out.append(gpu_finding(
                f, gi, "gpu_power_limit_low", limit[i, j],
                f"GPU {gi} on {f.node} is held to {limit[i, j]:.0f} W; the node's other GPUs "
                f"to {med[i, j]:.0f} W", "warning", self.c.power_low_for_s,
                {"power_limit_w": limit[i, j], "peer_power_limit_w": med[i, j]},
                "Check who set the limit (nvidia-smi -q -d POWER) and the node's power supplies; "
                "restore the default limit"))
        return out

    def _hold(self, b: Batch, rows: np.ndarray, stuck: np.ndarray,
              hung_idle: np.ndarray) -> np.ndarray:
        """Which GPUs (rows x positions) with a hung kernel among peers that do not work
        were found stuck before and have not worked since; frame by frame, in order."""
        held = np.zeros_like(stuck)
        judged = stuck | hung_idle
        for i, j in flagged(judged | self._known(b, rows)):
            f = b.frames[rows[i]]
            key = (f.cluster, f.node, f.gpus[j].index, f.gpus[j].job)
            if hung_idle[i, j] and key in self._hung:
                held[i, j] = True
            elif stuck[i, j]:
                self._hung.add(key)
            else:
                self._hung.discard(key)
        return held

    def _settled(self, b: Batch, rows: np.ndarray, low: np.ndarray, rule: str
                 ) -> tuple[np.ndarray, dict[tuple[int, int], tuple[float, float]]]:
        """Which GPUs (rows x positions) found by ``rule`` in ``low`` have been so for
        SETTLE_S, frame by frame in order; and for each, how long it has, and how long it had
        when it first had for that long (its alert's for-duration counts from its first
        sample so).
        """
        out = np.zeros_like(low)
        held: dict[tuple[int, int], tuple[float, float]] = {}
        since = self._since[rule]
        # Every GPU of a node with one low now or before: one that is not low clears.
        nodes = {k[:2] for k in since}
        nodes.update((f.cluster, f.node) for f in
                     (b.frames[rows[i]] for i in np.flatnonzero(low.any(axis=1)).tolist()))
        if not nodes:
            return out, held
        kept: set[GpuKey] = set()
        for i, r in enumerate(rows.tolist()):
            f = b.frames[r]
            if (f.cluster, f.node) not in nodes:
                continue
            for j, gpu in enumerate(f.gpus):
                key = (f.cluster, f.node, gpu.index, gpu.job)
                if not low[i, j]:
                    since.pop(key, None)
                    kept.discard(key)
                    continue
                first, settled = since.get(key, (f.ts, None))
                if settled is None and f.ts - first >= SETTLE_S:
                    settled = f.ts
                since[key] = (first, settled)
                kept.add(key)
                if settled is not None:
                    out[i, j] = True
                    held[i, j] = (f.ts - first, settled - first)
        # A GPU of a node in this batch that no longer reads in that job (the job ended or
        # left it) is low no more.
        here = {(f.cluster, f.node) for f in b.frames}
        for key in [k for k in since if k[:2] in here and k not in kept]:
            del since[key]
        return out, held

    def _known(self, b: Batch, rows: np.ndarray) -> np.ndarray:
        """The GPUs of these rows that are in ``_hung`` (to forget those that work)."""
        out = np.zeros(b.job[rows].shape, bool)
        if self._hung:
            for i, r in enumerate(rows.tolist()):
                f = b.frames[r]
                for j, g in enumerate(f.gpus):
                    out[i, j] = (f.cluster, f.node, g.index, g.job) in self._hung
        return out

    def _judge(self, b: Batch, rows: np.ndarray) -> list[Finding]:
        c = self.c
        x = b.x[rows]
        act = np.where(np.isfinite(x[..., SM]), x[..., SM], x[..., UTIL] / 100.0)
        clock, power = x[..., CLOCK], x[..., POWER]
        injob = (b.job[rows] >= 0) & ~b.lost[rows]
        peers = same_job_peers(b, rows, injob & np.isfinite(act))
        act_med, n = peer_median(np.where(np.isfinite(act), act, np.nan), peers)
        busy = (n >= 1) & (act_med >= c.busy_activity)
        with np.errstate(invalid="ignore"):
            # Stuck only while the peers work: in an all-reduce wait every GPU of the job
            # has NCCL kernels resident on a few SMs, and one at 1% among peers at 6% is
            # that phase's spread, not a hang. Hung (a kernel resident the whole sample,
            # GPM's SM activity ~0) only says why in the message.
            resident = x[..., UTIL] >= RESIDENT_UTIL_PCT
            spinning = (x[..., SM] <= HUNG_SM_MAX) & (x[..., TENSOR] <= HUNG_TENSOR_MAX) \
                & (x[..., DRAM] <= HUNG_DRAM_MAX)
            signature = injob & resident & ((x[..., SM] <= c.stuck_activity) | spinning)
            # A hung kernel is stuck among peers that do some work, if not busy work: a job
            # whose compute phase runs at 20% SM activity (a small model, a pipeline) has
            # its hung GPU caught too; peers in an NCCL wait (a few SMs) do not count.
            # Nor do peers that show the hang themselves: a whole job blocked in a collective
            # is not one GPU stuck among working peers, whatever SM share its kernels hold.
            peers_hung, _ = peer_median(signature.astype(float), peers)
            working = (n >= 1) & (act_med >= c.stuck_peers_activity) & ~(peers_hung >= 0.5)
            idle = injob & busy & (act <= c.stuck_activity)
            stuck = idle | (injob & signature & working)
            held = self._hold(b, rows, stuck, signature & ~working)
            stuck |= held
            hung = stuck & signature
            # A kernel spinning on a few SMs is a hung kernel or a rank waiting in a
            # collective for its peers (ranks that finish an evaluation early wait in an
            # all-gather for minutes): only how long tells them apart, as for a whole job.
            spin = hung & ~idle
            # Clocks and power in MHz and watts: against peers of the same part only.
            clock_peers = same_job_peers(b, rows, injob & np.isfinite(clock), same_model=True)
            clock_med, cn = peer_median(clock, clock_peers)
            slow_clock = clock < c.straggler_clock_frac * clock_med
            # In a light phase (an exposed all-reduce, an input stall) SM activity says
            # little, but a GPU with a kernel resident nearly the whole sample runs at its
            # boost clock like its peers (GPU Boost: there is power to spare): one far
            # below them there is slow whatever the phase. Not a GPU that itself computes
            # while its peers wait (a pipeline stage): its clock may sit lower for power.
            light = (n >= 1) & ~busy & (act < c.busy_activity) & resident
            # A straggler in lockstep computes the whole step while its peers wait for it (their
            # SM activity falls below busy_activity when it is slow enough): a GPU computing
            # nearly the whole sample under its power limit, with no power cap, should run at
            # its boost clock like them; one far below is slow. One at its cap is not judged
            # here (a pipeline stage that computes while the others wait may sit lower for power).
            reasons = x[..., THROTTLE]
            capped = (throttle_bits(reasons) & SW_POWER_CAP) != 0
            computing = (n >= 1) & resident & (act >= c.busy_activity) & ~capped \
                & (power < UNCAPPED_POWER_FRAC * x[..., LIMIT])
            straggler = injob & ~stuck & (busy | light | computing) & slow_clock
            power_peers = same_job_peers(b, rows, injob & np.isfinite(power), same_model=True)
            power_med, pn = peer_median(power, power_peers)
            low_power = injob & busy & ~stuck & (pn >= 1) & (power_med >= BUSY_POWER_W) \
                & (power < c.power_low_frac * power_med)
        straggler, slow_for = self._settled(b, rows, straggler, "gpu_straggler")
        low_power, low_for = self._settled(b, rows, low_power, "gpu_power_low_vs_peers")
        out: list[Finding] = []
        for i, j in flagged(stuck | straggler | low_power):
            f = b.frames[rows[i]]
            g = f.gpus[j].index
            job = f.gpus[j].job
            first = len(out)
            ev = {"activity": act[i, j], "peer_activity": act_med[i, j], "peers": n[i, j],
                  "sm_clock_mhz": clock[i, j], "peer_sm_clock_mhz": clock_med[i, j],
                  "power_w": power[i, j], "peer_power_w": power_med[i, j],
                  # how many of the peers are of its model (clocks and power are theirs)
                  "clock_peers": cn[i, j], "power_peers": pn[i, j]}
            ev = {k: v for k, v in ev.items() if np.isfinite(v)}
            where = f"GPU {g} on {f.node} ({job_words(job, f.gpus[j].info)})"
            if stuck[i, j]:
                if not hung[i, j]:
                    why = f"idle ({act[i, j]:.0%} SM activity)"
                elif act[i, j] <= c.stuck_activity:
                    why = (f"a kernel resident ({x[i, j, UTIL]:.0f}% utilization) but no SM "
                           f"working ({act[i, j]:.0%} activity)")
                else:
                    why = (f"a kernel resident ({x[i, j, UTIL]:.0f}% utilization) spinning "
                           f"on a few SMs ({act[i, j]:.0%} activity) with no tensor or "
                           "memory work")
                why += f" while its {n[i, j]} job peers run at {act_med[i, j]:.0%}"
                out.append(gpu_finding(
                    f, g, "gpu_stuck", act[i, j], f"{where} stuck: {why}", "critical",
                    c.job_hang_s if spin[i, j] else c.stuck_for_s, ev,
                    "The job is likely hung on this GPU: dump its rank's stack (py-spy dump "
                    "--pid PID) to see whether it waits in a collective for its peers or its "
                    "kernel hangs; if it hangs, restart the job without this GPU and reset it"))
            if straggler[i, j]:
                what = (f"SM clock {clock[i, j]:.0f} MHz against {clock_med[i, j]:.0f}, "
                        f"{act[i, j]:.0%} SM activity against {act_med[i, j]:.0%}")
                slow_s, settled_s = slow_for[i, j]
                out.append(gpu_finding(
                    f, g, "gpu_straggler", act[i, j], f"{where} lags its job peers: {what}",
                    "warning", max(c.straggler_for_s - settled_s, 0.0),
                    {**ev, "slow_for_s": slow_s},
                    "The whole job waits for this GPU: check its clocks, throttle reasons and "
                    "PCIe/NVLink errors; move the job off it if it persists"))
            if low_power[i, j]:
                low_s, settled_s = low_for[i, j]
                out.append(gpu_finding(
                    f, g, "gpu_power_low_vs_peers", power[i, j],
                    f"{where} draws {power[i, j]:.0f} W against {power_med[i, j]:.0f} W for "
                    f"its job peers of its model, for {low_s:.0f} s", "warning",
                    max(c.power_low_for_s - settled_s, 0.0), {**ev, "low_for_s": low_s},
                    "Check its power limit and throttle reasons (power brake, power cap) and "
                    "the node's power supplies"))
            tags = job_tags(job, f.gpus[j].info)
            out[first:] = [replace(x, **tags) for x in out[first:]]
        return out
