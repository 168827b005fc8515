"""A node without GPUs (a login node, an agent without NVML: "host-only") sends frames with
no GPU reading. Every detector takes them, alone or beside GPU frames, without an error:
the processor counts a detector's exception as a bug, and FleetwatchProcessorErrors pages."""

from __future__ import annotations

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, HostReading
from fleetwatch.wiring import detectors
from tests.models.helpers import busy, node


def host_only(ts: float, name: str = "login-01") -> Frame:
    return Frame("c", "r1", name, ts, (), HostReading({"host_cpu_util_pct": 12.0}))


def test_every_detector_takes_frames_without_gpus() -> None:
    ds = detectors(DetectorsConfig())
    for k in range(30):
        t = 1000 + 5.0 * k
        only = [host_only(t), host_only(t, "login-02")]
        mixed = [host_only(t + 1), node(t + 1, [busy(60.0)] * 4, name="gpu-01")]
        for d in ds:
            assert d.update(only) == [], d.name
            assert [f for f in d.update(mixed) if f.node.startswith("login")] == [], d.name
