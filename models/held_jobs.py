"""The job each GPU held at its last reading, for the alerts of a GPU that crashed it.

An XID 79 or a lost GPU ends its job: the frame that reports the loss may name no job any
more (a lost GPU reports nothing, and the scheduler frees it), yet the job that held the
GPU is what its user looks for. ``HeldJobs`` keeps, per GPU, the job of its newest
reading that was not lost, so a lost GPU's alerts name the job it held when it fell off.
A GPU read again with no job has none: an idle GPU's XID names no old job.

The job's user and team (``GpuReading.info``, which the agent reads from the scheduler) are
kept with it: whom the on-call tells that their run died. Where the frames name none,
nothing is said of them (``job_words``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fleetwatch.frame import Frame, GpuReading

_Node = tuple[str, str]  # (cluster, node)


class HeldJobs:
    """Per GPU, the job it held at its newest reading that was not lost.

    Cheap per frame, as the detectors see every frame: a node's newest frame with no GPU
    lost is kept whole (one dict write); only while a GPU of the node is lost (rare) are
    its other GPUs' jobs kept one by one, so they stay current meanwhile."""

    def __init__(self) -> None:
        self._clean: dict[_Node, Frame] = {}
        self._since: dict[_Node, dict[int, GpuReading]] = {}

    def see(self, f: Frame, any_lost: bool | None = None) -> None:
        """Take in one frame (frames of a node in time order); ``any_lost``: whether a GPU
        of it is lost, where the caller knows."""
        node = (f.cluster, f.node)
        if any_lost is None:
            any_lost = any(g.state == "lost" for g in f.gpus)
        if not any_lost:
            self._clean[node] = f
            if self._since:
                self._since.pop(node, None)
            return
        since = self._since.setdefault(node, {})
        for g in f.gpus:
            if g.state != "lost":  # a lost GPU's job stands until it is read again
                since[g.index] = g

    def held(self, f: Frame, gpu: int) -> GpuReading | None:
        """The reading of GPU ``gpu`` that names its job: the frame's own, else, if it is
        lost, its newest one before (None: never read before)."""
        reading = f.gpu(gpu)
        if reading is not None and (reading.job or reading.state != "lost"):
            return reading
        node = (f.cluster, f.node)
        since = self._since.get(node, {})
        if gpu in since:
            return since[gpu]
        clean = self._clean.get(node)
        return clean.gpu(gpu) if clean is not None else None

    def of(self, f: Frame, gpu: int) -> str:
        """The job GPU ``gpu`` of frame ``f`` holds ("" for none): the frame's own, else,
        if it is lost, the one it held before."""
        reading = self.held(f, gpu)
        return (reading.job or "") if reading is not None else ""

    def where(self, f: Frame, gpu: int) -> str:
        """``GPU 2 on node-004 (job 4000005, user-02, team vision)``: as the job detectors
        name a GPU (``job_words``)."""
        reading = self.held(f, gpu)
        job = (reading.job or "") if reading is not None else ""
        words = job_words(job, reading.info if reading is not None else None)
        return f"GPU {gpu} on {f.node}" + (f" ({words})" if words else "")

    def tags(self, f: Frame, gpu: int) -> dict[str, Any]:
        """The finding fields of the job GPU ``gpu`` holds: ``jobs``, ``users``, ``teams``
        (``job_tags``), for ``dataclasses.replace``."""
        reading = self.held(f, gpu)
        if reading is None or not reading.job:
            return job_tags(None, None)
        return job_tags(reading.job, reading.info)

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for held in (self._clean, self._since):
            for key in [k for k in held if k[1] in gone]:
                del held[key]


def names(text: str | None) -> tuple[str, ...]:
    """A comma-joined field (a shared GPU's jobs, users, teams) as its names, each once, in
    order; () for none."""
    return tuple(dict.fromkeys(n for n in text.split(",") if n)) if text else ()


def job_words(job: str | None, info: Mapping[str, str] | None) -> str:
    """``job 4000003, user-02, team multimodal``: a job and whom it belongs to, as the
    agent read them from the scheduler (``info`` user and team); only what is known: "job
    42" alone where the frame names no owner, "" for no job (an idle GPU's owner is no
    job's)."""
    if not job:
        return ""
    users, teams = owners(info)
    return ", ".join([f"job {job}", *([",".join(users)] if users else []),
                      *([f"team {','.join(teams)}"] if teams else [])])


def owners(info: Mapping[str, str] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The users and the teams a GPU reading's ``info`` names (a shared GPU's, each once)."""
    if not info:
        return (), ()
    return names(info.get("user")), names(info.get("team"))


def job_tags(job: str | None, info: Mapping[str, str] | None) -> dict[str, Any]:
    """A finding's ``jobs``, ``users`` and ``teams`` from a reading's job and ``info``; no
    owner without a job."""
    users, teams = owners(info) if job else ((), ())
    return {"jobs": tuple(j for j in job.split(",") if j) if job else (),
            "users": users, "teams": teams}


def node_job_tags(f: Frame, jobs: Iterable[str]) -> dict[str, Any]:
    """``job_tags`` of a node alert about ``jobs`` (as its GPUs name them): the owners its
    GPUs holding them name, each once."""
    wanted = list(dict.fromkeys(jobs))
    users: dict[str, None] = {}
    teams: dict[str, None] = {}
    for g in f.gpus:
        if g.job in wanted:
            u, t = owners(g.info)
            users.update(dict.fromkeys(u))
            teams.update(dict.fromkeys(t))
    return {"jobs": tuple(j for job in wanted for j in job.split(",") if j),
            "users": tuple(users), "teams": tuple(teams)}
