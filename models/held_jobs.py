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

_Key = tuple[str, str, int]  # (cluster, node, GPU index)


class HeldJobs:
    """Per GPU, the job it held at its newest reading that was not lost."""

    def __init__(self) -> None:
        self._job: dict[_Key, str] = {}

    def see(self, f: Frame) -> None:
        """Take in one frame (frames of a node in time order)."""
        for g in f.gpus:
            if g.state == "lost":
                continue  # the job it held stands until it is read again
            if g.job:
                self._job[(f.cluster, f.node, g.index)] = g.job
            elif self._job:
                self._job.pop((f.cluster, f.node, g.index), None)

    def of(self, f: Frame, gpu: int) -> str:
        """The job GPU ``gpu`` of frame ``f`` holds ("" for none): the frame's own, else
        the one it held before it was lost."""
        reading = f.gpu(gpu)
        if reading is not None and reading.job:
            return reading.job
        return self._job.get((f.cluster, f.node, gpu), "")

    def where(self, f: Frame, gpu: int) -> str:
        """``GPU 2 on node-004 (job 4000005)``: as the job detectors name a GPU."""
        job = self.of(f, gpu)
        return f"GPU {gpu} on {f.node}" + (f" (job {job})" if job else "")

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self._job if k[1] in gone]:
            del self._job[key]
