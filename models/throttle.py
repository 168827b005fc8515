"""The driver's own throttle reasons (``gpu_throttle_reasons``): a hardware slowdown is
serious (a power brake, the GPU's own thermal protection), a thermal one by the driver is a
warning. What a GPU's temperatures say against its limits is ``thermal``'s."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.batch import COL, columns, flagged, gpu_finding, thermal_keep, throttle_bits
from fleetwatch.models.thermal import COOLING

TEMP, POWER, THROTTLE = COL["gpu_temp_c"], COL["gpu_power_w"], COL["gpu_throttle_reasons"]

_HW = (THROTTLE_FLAGS["hw_slowdown"] | THROTTLE_FLAGS["hw_thermal_slowdown"]
       | THROTTLE_FLAGS["hw_power_brake_slowdown"])
_SW_THERMAL = THROTTLE_FLAGS["sw_thermal_slowdown"]


class Throttle:
    """The driver's own throttle reasons: hardware slowdowns are serious, thermal ones too."""

    name = "throttle"
    rules = {"gpu_hw_slowdown": ("gpu_throttle_reasons",),
             "gpu_sw_thermal_slowdown": ("gpu_throttle_reasons",)}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()

    def drop(self, nodes: Iterable[str]) -> None:
        """No per-node state."""

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        b = columns(frames)
        out: list[Finding] = []
        if not b.frames:
            return out
        raw = b.x[..., THROTTLE]
        bits = throttle_bits(raw)
        hw = (bits & _HW) != 0
        sw = (bits & _SW_THERMAL) != 0
        for i, j in flagged(hw | sw):
            f = b.frames[i]
            g = f.gpus[j].index
            names = [n for n, bit in THROTTLE_FLAGS.items() if bits[i, j] & bit]
            ev = {"throttle_reasons": float(bits[i, j]), "temp_c": b.x[i, j, TEMP],
                  "power_w": b.x[i, j, POWER]}
            ev = {k: v for k, v in ev.items() if np.isfinite(v)}
            ev.update(thermal_keep(self.c.thermal_keep_firing_s))
            where = f"GPU {g} on {f.node}"
            if hw[i, j]:
                brake = bits[i, j] & THROTTLE_FLAGS["hw_power_brake_slowdown"]
                out.append(gpu_finding(
                    f, g, "gpu_hw_slowdown", float(bits[i, j]),
                    f"{where} clocks held down by hardware: {', '.join(names)}", "critical",
                    self.c.hw_slowdown_for_s, ev,
                    "Power brake: check the node's power supplies and cabling" if brake else
                    COOLING + "; HW slowdown also follows power supply faults"))
            if sw[i, j]:
                out.append(gpu_finding(
                    f, g, "gpu_sw_thermal_slowdown", float(bits[i, j]),
                    f"{where} clocks lowered by the driver to keep it cool: {', '.join(names)}",
                    "warning", self.c.sw_thermal_for_s, ev, COOLING))
        return out
