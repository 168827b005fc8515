"""The job each GPU held at its last reading, for the alerts of a GPU that crashed it.

An XID 79 or a lost GPU ends its job: the frame that reports the loss may name no job any
more (a lost GPU reports nothing, and the scheduler frees it), yet the job that held the
GPU is what its user looks for. ``HeldJobs`` keeps, per GPU, the job of its newest
reading that was not lost, so a lost GPU's alerts name the job it held when it fell off.
A GPU read again with no job has none: an idle GPU's XID names no old job.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleetwatch.frame import Frame

_Node = tuple[str, str]  # (cluster, node)


class HeldJobs:
    """Per GPU, the job it held at its newest reading that was not lost.

    Cheap per frame, as the detectors see every frame: a node's newest frame with no GPU
    lost is kept whole (one dict write); only while a GPU of the node is lost (rare) are
    its other GPUs' jobs kept one by one, so they stay current meanwhile."""

    def __init__(self) -> None:
        self._clean: dict[_Node, Frame] = {}
        self._since: dict[_Node, dict[int, str | None]] = {}

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
                since[g.index] = g.job

    def of(self, f: Frame, gpu: int) -> str:
        """The job GPU ``gpu`` of frame ``f`` holds ("" for none): the frame's own, else,
        if it is lost, the one it held before."""
        reading = f.gpu(gpu)
        if reading is not None and (reading.job or reading.state != "lost"):
            return reading.job or ""
        node = (f.cluster, f.node)
        since = self._since.get(node, {})
        if gpu in since:
            return since[gpu] or ""
        clean = self._clean.get(node)
        before = clean.gpu(gpu) if clean is not None else None
        return (before.job or "") if before is not None else ""

    def where(self, f: Frame, gpu: int) -> str:
        """``GPU 2 on node-004 (job 4000005)``: as the job detectors name a GPU."""
        job = self.of(f, gpu)
        return f"GPU {gpu} on {f.node}" + (f" (job {job})" if job else "")

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for held in (self._clean, self._since):
            for key in [k for k in held if k[1] in gone]:
                del held[key]
