"""What each GPU's reading gains beyond NVML: DCGM's profiling ratios where GPM has none,
and who runs there: its pod (the kubelet's pod-resources answer), user and team.

A GPU whose one job is a pod (``pod:<uid>``, from its cgroup) that the kubelet names as
the GPU's only holder is the job ``<namespace>/<pod>``, fixed when the pod is first seen
(the kubelet is asked again then), so a pod keeps one job name for its life. The user is
Slurm's job user, else the pod's namespace; the team the job's Slurm account, else the
pod's namespace (``collectors.jobs``). ``collectors.node`` calls ``attribute`` once a
tick with the GPUs NVML read.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from fleetwatch.collectors.dcgm import PROFILED, ProfilingSource
from fleetwatch.collectors.jobs import JobResolver
from fleetwatch.collectors.podresources import PodInfo, PodMapper, open_pod_mapper
from fleetwatch.frame import GpuReading

log = logging.getLogger(__name__)

POD_SOCKET_S = 10.0  # how often a missing kubelet socket is looked for (one stat)


class GpuAttribution:
    """Adds DCGM's ratios and the pod, user and team to each GPU reading; keeps, between
    ticks, the names given to pods and the info dicts made (a new one only on a change)."""

    def __init__(self, jobs: JobResolver, profiling: ProfilingSource | None = None,
                 pods: PodMapper | None = None, pod_socket: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.jobs = jobs
        self._clock = clock
        self.profiling = profiling
        self._said_no_profiling = False
        self.pods = pods
        # The kubelet's socket where it was not there at start (the agent started before
        # the kubelet at boot, a node turned to Kubernetes): looked for every POD_SOCKET_S.
        self._pod_socket = pod_socket if pods is None else ""
        self._next_pod_look = 0.0
        self._said_no_socket = False
        # GPU index -> (the reader's info, user, pod) and the info made from them: a new
        # dict only when one of them changes, not every tick.
        self._info: dict[int, tuple[tuple[object, ...], dict[str, str]]] = {}
        # "pod:<uid>" -> "<namespace>/<pod>" (or itself) and the kubelet's answer that named
        # it: the pod labels of its GPU come from that same answer, never a later pod's.
        self._pod_jobs: dict[str, tuple[str, PodInfo | None]] = {}

    def _say_no_profiling(self, gpus: list[GpuReading]) -> None:
        """Once: a GPU without GPM (before Hopper) and no DCGM lacks its activity ratios."""
        bare = [g for g in gpus if g.state == "ok" and g.info.get("profiling") == "none"]
        if bare:
            self._said_no_profiling = True
            log.info("%d GPU(s) (%s) have no GPM (GPUs before Hopper, or GPM sampling "
                     "answering NotSupported) and DCGM is not available: their SM, tensor and "
                     "DRAM activity ratios are absent. To get them, install "
                     "datacenter-gpu-manager, run nv-hostengine and put its Python bindings on "
                     "PYTHONPATH (agent.dcgm = true)", len(bare),
                     f"GPU {', '.join(str(g.index) for g in bare)}: "
                     f"{', '.join(sorted({g.model for g in bare}))}")

    def attribute(self, gpus: list[GpuReading], pids: dict[int, list[int]]
                  ) -> list[GpuReading]:
        """DCGM's profiling ratios where GPM has none; the user and the pod of each GPU."""
        prof = self.profiling.read() if self.profiling is not None else {}
        if self.profiling is None and not self._said_no_profiling:
            self._say_no_profiling(gpus)
        pods: dict[str, PodInfo] = {}
        if self.pods is None and self._pod_socket:
            self._look_for_pod_socket(gpus)
        if self.pods is not None:
            new = any(_pod_job(g.job) and g.job not in self._pod_jobs for g in gpus)
            pods = self.pods.by_uuid(fresh=new)
        if not prof and not pods and not self.jobs.has_users:
            return gpus
        out = []
        for g in gpus:
            metrics = g.metrics
            extra: dict[str, str] = {}
            got = prof.get(g.uuid)
            if got and g.state == "ok" and not any(k in metrics for k in PROFILED):
                metrics = {**metrics, **got}
                extra["profiling"] = "dcgm"
            pod = pods.get(g.uuid) or pods.get(str(g.index))  # by UUID, or by NVML index
            job = g.job
            if _pod_job(g.job):
                job, named = self._pod_job_name(g.job, pod)
                # Not named (a GPU given out in parts, no kubelet answer): no pod label,
                # which could be another pod's; the namespace of a shared GPU's pods.
                pod = named or (PodInfo("", pod.namespace, "", shared=True)
                                if pod is not None and pod.shared else None)
            if pod is not None:
                extra.update(pod=pod.pod, namespace=pod.namespace, container=pod.container)
            # Energy per user and team: Slurm's job user and account, else on Kubernetes
            # the pod's namespace for both (of a GPU several pods share, their one
            # namespace: whichever runs there, the energy is that namespace's).
            held = pids.get(g.index, ())
            ns = pod.namespace if pod is not None else None
            user = self.jobs.user_of_pids(held) or ns
            if user:
                extra["user"] = user
            team = self.jobs.team_of_pids(held) or ns
            if team:
                extra["team"] = team
            # The codec takes info values of 1..256 printable characters: keep to that here
            # rather than have the processor dead-letter the whole frame.
            extra = {k: v[:256] for k, v in extra.items() if v and v.isprintable()}
            info = self._merged_info(g, extra)
            if metrics is not g.metrics or info is not g.info or job != g.job:
                g = dataclasses.replace(g, metrics=metrics, info=info, job=job)
            out.append(g)
        if len(self._pod_jobs) > 4 * len(gpus) + 16:  # pods come and go: keep those on GPUs
            self._pod_jobs = {g.job: self._pod_jobs[g.job] for g in gpus
                              if g.job in self._pod_jobs}
        return out

    def _look_for_pod_socket(self, gpus: list[GpuReading]) -> None:
        """Open the kubelet's socket once it exists (one stat every ``POD_SOCKET_S``);
        say once where GPUs run pods and there is none yet."""
        now = self._clock()
        if now < self._next_pod_look:
            return
        self._next_pod_look = now + POD_SOCKET_S
        self.pods = open_pod_mapper(self._pod_socket)
        if self.pods is not None:
            log.info("kubelet pod-resources socket %s found: GPUs' pods are named from now on",
                     self._pod_socket)
            self._pod_socket = ""
        elif not self._said_no_socket and any(_pod_job(g.job) for g in gpus):
            self._said_no_socket = True
            log.warning("GPUs run Kubernetes pods (pod:<uid> cgroups) but the kubelet's "
                        "pod-resources socket %s is not there: pods keep pod:<uid> with no "
                        "user or team until it appears (looked for every %.0f s); set "
                        "agent.pod_resources_socket if the kubelet keeps it elsewhere",
                        self._pod_socket, POD_SOCKET_S)

    def _pod_job_name(self, job: str | None, pod: PodInfo | None
                      ) -> tuple[str | None, PodInfo | None]:
        """A pod's job as people name it, ``<namespace>/<pod>``, where the kubelet named
        the GPU's only pod when this one was first seen; else ``pod:<uid>`` as it was;
        with the pod of that answer (None where it named none), for the GPU's labels."""
        assert job is not None
        if self.pods is None:
            return job, None  # no kubelet yet: named once its socket is found
        named = self._pod_jobs.get(job)
        if named is None:
            # A kubelet that failed to answer gave its last answer: perhaps another pod's.
            answered = self.pods is not None and not self.pods.failing
            named = (job, None)
            if answered and pod is not None and not pod.shared and pod.namespace and pod.pod:
                named = (f"{pod.namespace}/{pod.pod}", pod)
            self._pod_jobs[job] = named
        return named

    def _merged_info(self, g: GpuReading, extra: dict[str, str]) -> Mapping[str, str]:
        if not extra:
            return g.info
        key = (id(g.info), *sorted(extra.items()))
        cached = self._info.get(g.index)
        if cached is not None and cached[0] == key:
            return cached[1]
        info = {**g.info, **extra}
        self._info[g.index] = (key, info)
        return info

    def close(self) -> None:
        for edge in (self.profiling, self.pods):
            if edge is not None:
                edge.close()


def _pod_job(job: str | None) -> bool:
    """A GPU's one job is a Kubernetes pod (``pod:<uid>`` from its cgroup)."""
    return job is not None and job.startswith("pod:") and "," not in job
