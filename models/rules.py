"""Fixed-limit rules: the simplest detectors, and the ones operators expect first."""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.frame import Frame
from fleetwatch.models import Finding


class GpuTemperatureLimit:
    """GPU die temperature at or above a fixed limit.

    With hysteresis: a hot GPU stays hot until it is ``hysteresis_c`` below the
    limit, so a GPU hovering at the limit (as one held at its slowdown point
    does) raises one alert, not one a minute.
    """

    name = "gpu_temp_high"
    rules = {"gpu_temp_high": ("gpu_temp_c",)}

    def __init__(self, limit_c: float = 85.0, for_s: float = 60.0,
                 severity: str = "critical", hysteresis_c: float = 3.0) -> None:
        self.limit_c = limit_c
        self.for_s = for_s
        self.severity = severity
        self.hysteresis_c = hysteresis_c
        self._hot: set[tuple[str, str, int]] = set()  # (cluster, node, GPU index)

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        out = []
        hot = self._hot
        for f in frames:
            for g in f.gpus:
                temp = g.metrics.get("gpu_temp_c")
                if temp is None:
                    continue
                key = (f.cluster, f.node, g.index)
                floor = self.limit_c - self.hysteresis_c if key in hot else self.limit_c
                if temp < floor:
                    hot.discard(key)
                    continue
                hot.add(key)
                out.append(Finding(
                    self.name, f.cluster, f.rack, f.node, g.index, f.ts, temp,
                    f"GPU {g.index} on {f.node} at {temp:.0f} °C, limit {self.limit_c:.0f} °C",
                    self.severity, self.for_s))
        return out
