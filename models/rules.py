"""Fixed-limit rules: the simplest detectors, and the ones operators expect first."""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.frame import Frame
from fleetwatch.models import Finding


class GpuTemperatureLimit:
    """GPU die temperature at or above a fixed limit."""

    name = "gpu_temp_high"

    def __init__(self, limit_c: float = 85.0, for_s: float = 60.0,
                 severity: str = "critical") -> None:
        self.limit_c = limit_c
        self.for_s = for_s
        self.severity = severity

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        out = []
        for f in frames:
            for g in f.gpus:
                temp = g.metrics.get("gpu_temp_c")
                if temp is not None and temp >= self.limit_c:
                    out.append(Finding(
                        self.name, f.cluster, f.rack, f.node, g.index, f.ts, temp,
                        f"GPU {g.index} on {f.node} at {temp:.0f} °C, limit {self.limit_c:.0f} °C",
                        self.severity, self.for_s))
        return out
