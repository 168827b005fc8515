"""LLM-training-like jobs on whole nodes, and the phases that drive their GPUs.

A job holds 1..32 nodes (all their GPUs) and moves through phases together:

* ``compute``: forward/backward kernels; SM activity at the job's own level
  (model size, parallelism and kernel efficiency spread it across the whole
  range), tensor pipes busy, power high;
* ``comm``: exposed NCCL all-reduce/all-gather waits; the NCCL kernels keep
  ``gpu_util_pct`` at 100 (a kernel is running) on a few SMs, so SM activity
  is low and the board draws ~100 W, while NVLink (and, for a job on several
  nodes, PCIe to the NICs) moves GB/s: what sets it apart from a hung job;
* ``input``: the data loader cannot keep up; kernels run in bursts;
* ``checkpoint``: the state is copied to the host and written out: the GPU
  barely computes, the host CPU and PCIe are busy;
* ``eval``: forward passes only, moderate activity;
* ``idle``: allocated but nothing runs (an interactive session between runs);
* ``init``: the first minutes (loading, compiling, NCCL setup).

GPUs of a job share its phase with a small per-GPU spread. The targets are
per node arrays, updated only when a phase changes, so a step costs nothing
per job.

Each phase also sets how busy the GPU's links are (``LINKS``: the share of the
part's NVLink and PCIe peak each way, averaged over a sample). An exposed
all-reduce keeps NVLink busy: nccl-tests' ring all-reduce reaches a bus bandwidth of
~70-80% of the links' peak on large messages, and over a 15 s sample of an exposed
communication phase the links are busy about half the time: 0.35 of peak, 105 GB/s
each way on an A100 (NVLink 3, 300 GB/s), 158 GB/s on an H100 (NVLink 4, 450 GB/s).
The gradient traffic a compute phase overlaps with its backward pass averages less
(0.1). A job on several nodes sends its inter-node share through the GPU's PCIe to its
NIC (GPUDirect RDMA): 0.25 of PCIe in an exposed phase, about a 200-400 Gb/s NIC's
worth. A checkpoint copies the state to the host over PCIe; input batches come in over
it. These shares draw nothing from the jobs' random stream: the fleet's history is the
same with or without them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PHASES = ("compute", "comm", "input", "checkpoint", "eval", "idle", "init")
NEXT = PHASES[:6]
MEAN_S = {"compute": 25 * 60.0, "comm": 8 * 60.0, "input": 6 * 60.0, "checkpoint": 3 * 60.0,
          "eval": 6 * 60.0, "idle": 20 * 60.0, "init": 4 * 60.0}
# Share of small jobs that are interactive (notebooks, debugging): the GPUs are
# allocated and mostly idle, as the Acme study found of many of its GPUs.
INTERACTIVE = 0.25
SIZES = np.array([1, 2, 4, 8, 16, 32])
SIZE_P = np.array([0.34, 0.22, 0.17, 0.13, 0.09, 0.05])
# Per phase: (NVLink share, PCIe share for a one-node job, PCIe share on several nodes).
LINKS = {"compute": (0.1, 0.01, 0.08), "comm": (0.35, 0.01, 0.25), "input": (0.03, 0.05, 0.05),
         "checkpoint": (0.0, 0.2, 0.2), "eval": (0.03, 0.02, 0.03), "idle": (0.0, 0.0, 0.0),
         "init": (0.01, 0.05, 0.05)}
USERS = 48
TEAMS = ("llm-pretrain", "llm-posttrain", "multimodal", "inference-research", "speech", "infra")


@dataclass
class Job:
    num: int
    id: str
    nodes: list[int]
    end_ts: float
    base_sm: float        # SM activity of its compute phase
    tensor_share: float   # tensor-pipe activity per SM activity
    dram: float           # DRAM activity of its compute phase
    occupancy: float      # warps resident per SM activity
    fb_frac: float        # share of HBM it allocates
    weights: np.ndarray   # probabilities of the next phase (over NEXT)
    info: dict[str, str]
    phase: str = "init"
    phase_end: float = 0.0


class Jobs:
    """The scheduler and the per-node phase targets (``sm``, ``tensor``, ...)."""

    def __init__(self, nodes: int, gpus: int, rng: np.random.Generator, job_mean_s: float,
                 idle_mean_s: float, steady: bool = False, first_id: int = 4_000_001
                 ) -> None:
        self.rng, self.n, self.g = rng, nodes, gpus
        self.first_id = first_id  # the job id of number 1 (numbers index arrays from 0)
        self.steady = steady  # every job compute-bound from start to end
        self.job_mean_s, self.idle_mean_s = job_mean_s, idle_mean_s
        self.num = np.full(nodes, -1)           # job number per node, -1 idle
        self.next_start = np.zeros(nodes)
        self.drained = np.zeros(nodes, bool)    # kept out of scheduling (a lost GPU)
        self.running: dict[int, Job] = {}
        self.by_num: dict[int, Job] = {}
        self._seq = 0
        self._queued = 0
        self._queued_since = 0.0
        z = np.arange(1, USERS + 1) ** -0.9     # a few users run most of the work
        self._user_p = z / z.sum()
        self.sm = np.zeros(nodes)
        self.tensor = np.zeros(nodes)
        self.dram = np.zeros(nodes)
        self.occ = np.zeros(nodes)
        self.util = np.zeros(nodes)
        self.host_cpu = np.full(nodes, 3.0)
        self.nvlink = np.zeros(nodes)           # share of NVLink's peak each way
        self.pcie = np.zeros(nodes)             # share of PCIe's peak each way
        self.fb_frac = np.zeros(nodes)
        self.gpu_mult = np.ones((nodes, gpus))  # a GPU's spread around its job's level

    @property
    def busy(self) -> np.ndarray:
        return self.num >= 0

    def start(self, nodes: list[int], ts: float, remaining: float) -> Job:
        rng = self.rng
        self._seq += 1
        user = int(rng.choice(USERS, p=self._user_p))
        size = len(nodes)
        comm = 0.12 + 0.05 * math.log2(size) + rng.uniform(0.0, 0.15)
        inp = rng.uniform(0.03, 0.2)
        weights = np.array([1.0, comm * 2.5, inp * 2.5, 0.12, 0.12, 0.02])
        end_ts = ts + max(remaining, 300.0)
        if self.steady:
            weights = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        elif size <= 2 and rng.random() < INTERACTIVE:
            weights = np.array([0.3, 0.0, 0.15, 0.0, 0.1, 1.0])
            end_ts = min(end_ts, ts + rng.exponential(1.5 * 3600.0) + 600.0)  # a work session
        job = Job(self._seq, str(self.first_id - 1 + self._seq), nodes, end_ts,
                  base_sm=float(rng.uniform(0.75, 0.95) if self.steady
                                else np.clip(rng.beta(2.4, 1.4), 0.1, 0.97)),
                  tensor_share=float(rng.uniform(0.35, 0.8)),
                  dram=float(rng.uniform(0.15, 0.55)),
                  occupancy=float(rng.uniform(0.25, 0.6)),
                  fb_frac=float(rng.uniform(0.45, 0.97)),
                  weights=weights / weights.sum(),
                  info={"user": f"user-{user:02d}", "team": TEAMS[user % len(TEAMS)]})
        self.running[job.num] = self.by_num[job.num] = job
        idx = np.array(nodes)
        self.num[idx] = job.num
        self.gpu_mult[idx] = rng.normal(1.0, 0.035, (len(nodes), self.g)).clip(0.85, 1.15)
        self.fb_frac[idx] = job.fb_frac
        self._enter(job, "compute" if self.steady else "init", ts)
        return job

    def end(self, job: Job, ts: float) -> None:
        idx = np.array(job.nodes)
        self.num[idx] = -1
        self.next_start[idx] = ts + self.rng.exponential(self.idle_mean_s, len(idx))
        for arr, idle in ((self.sm, 0.0), (self.tensor, 0.0), (self.dram, 0.0), (self.occ, 0.0),
                          (self.util, 0.0), (self.host_cpu, 3.0), (self.fb_frac, 0.0),
                          (self.nvlink, 0.0), (self.pcie, 0.0)):
            arr[idx] = idle
        del self.running[job.num]

    def _enter(self, job: Job, phase: str, ts: float) -> None:
        rng = self.rng
        job.phase = phase
        job.phase_end = ts + rng.exponential(MEAN_S[phase]) + 30.0
        b, ts_ = job.base_sm, job.tensor_share
        if phase == "compute":
            sm, util, cpu = b, rng.uniform(97, 100), rng.uniform(20, 40)
            tensor, dram = b * ts_, job.dram
        elif phase == "comm":
            sm, util, cpu = rng.uniform(0.05, 0.2), 100.0, rng.uniform(10, 25)
            tensor, dram = sm * 0.05, rng.uniform(0.03, 0.1)
        elif phase == "input":
            sm, util, cpu = b * rng.uniform(0.15, 0.4), rng.uniform(35, 95), rng.uniform(60, 95)
            tensor, dram = sm * ts_, job.dram * 0.3
        elif phase == "checkpoint":
            sm, util, cpu = rng.uniform(0.0, 0.04), rng.uniform(2, 25), rng.uniform(50, 90)
            tensor, dram = 0.0, rng.uniform(0.02, 0.06)
        elif phase == "eval":
            sm, util, cpu = b * rng.uniform(0.4, 0.75), rng.uniform(90, 100), rng.uniform(25, 45)
            tensor, dram = sm * ts_ * 0.8, job.dram * 0.8
        elif phase == "idle":
            sm, util, cpu = 0.0, 0.0, rng.uniform(1, 5)
            tensor, dram = 0.0, 0.0
        else:  # init
            sm, util, cpu = rng.uniform(0.0, 0.05), rng.uniform(0, 30), rng.uniform(40, 80)
            tensor, dram = 0.0, rng.uniform(0.0, 0.05)
        idx = np.array(job.nodes)
        self.sm[idx], self.tensor[idx], self.dram[idx] = sm, tensor, dram
        self.occ[idx] = sm * job.occupancy
        self.util[idx], self.host_cpu[idx] = util, cpu
        nvlink, pcie_one, pcie_many = LINKS[phase]
        self.nvlink[idx] = nvlink
        self.pcie[idx] = pcie_many if len(job.nodes) > 1 else pcie_one

    def advance(self, ts: float) -> None:
        """End due jobs, start queued ones, move running jobs to their next phase."""
        for job in [j for j in self.running.values() if j.end_ts <= ts]:
            self.end(job, ts)
        self._schedule(ts)
        for job in self.running.values():
            if job.phase_end <= ts:
                self._enter(job, str(self.rng.choice(NEXT, p=job.weights)), ts)

    def _schedule(self, ts: float) -> None:
        """Start the queued job once enough nodes are free.

        The queue is one job deep: its size is drawn when it is queued, and it
        waits, as on a real scheduler, until that many nodes are idle, so big
        jobs are as common as the draw says (and leave nodes idle meanwhile).
        """
        rng = self.rng
        while True:
            if self._queued == 0:
                self._queued = min(self.n, int(rng.choice(SIZES, p=SIZE_P)))
                self._queued_since = ts
            # Never wait for more nodes than can ever be free (some are drained).
            self._queued = min(self._queued, max(1, int((~self.drained).sum())))
            ready = np.flatnonzero((self.num < 0) & (self.next_start <= ts) & ~self.drained)
            if len(ready) < self._queued:
                # A head job that waited long for nodes that do not come is resubmitted
                # on what is free (users shrink jobs that do not start), so no node starves.
                if not len(ready) or ts - self._queued_since < 2 * self.idle_mean_s + 1800.0:
                    return
                self._queued = len(ready)
            remaining = rng.lognormal(math.log(self.job_mean_s) - 0.5, 1.0)
            self.start([int(i) for i in ready[:self._queued]], ts, remaining)
            self._queued = 0
