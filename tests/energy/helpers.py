"""Frames with known power profiles, written by hand for the energy tests."""

from __future__ import annotations

from fleetwatch.frame import Frame, GpuReading, HostReading


def frame(ts: float, gpus: dict[int, dict[str, float]], *, node: str = "n1",
          cluster: str = "c1", rack: str = "r1", job: str | None = None,
          user: str = "", host: dict[str, float] | None = None,
          model: str = "test") -> Frame:
    info = {"user": user} if user else {}
    readings = tuple(GpuReading(i, f"GPU-{node}-{i}", model, m, job, info=info)
                     for i, m in gpus.items())
    return Frame(cluster, rack, node, ts, readings, HostReading(host or {}))
