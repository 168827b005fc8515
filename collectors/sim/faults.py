"""Faults the simulator can inject, and the ground truth it records for each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

FaultKind = Literal["cooling"]
KINDS: tuple[str, ...] = ("cooling",)

_SPEC = re.compile(
    r"^(?P<kind>[a-z]+):(?P<node>[^/@]+)/(?P<gpu>\d+)"
    r"(?:@(?P<start>[\d.]+[smhd]?))?(?:\+(?P<dur>[\d.]+[smhd]?))?(?:x(?P<sev>[\d.]+))?$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault to inject: ``start_s`` after the simulation starts, for ``duration_s``.

    cooling: the GPU's heat path degrades (a failing fan, a blocked cold plate):
    its thermal resistance ramps up to ``severity`` times normal over five
    minutes, so its temperature climbs while its power stays as before.
    """

    kind: FaultKind
    node: str
    gpu: int
    start_s: float = 60.0
    duration_s: float = 3600.0
    severity: float = 2.0


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """Ground truth: what was injected, where, and when it began and ended (epoch s)."""

    kind: str
    node: str
    gpu: int
    onset_ts: float
    end_ts: float
    severity: float


def _seconds(text: str) -> float:
    unit = text[-1] if text[-1] in _UNIT else "s"
    return float(text.rstrip("smhd")) * _UNIT[unit]


def parse_fault(spec: str) -> Fault:
    """``KIND:NODE/GPU[@START][+DURATION][xSEVERITY]``, e.g. ``cooling:node-01/3@2m+1h``."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(f"fault {spec!r}: expected KIND:NODE/GPU[@START][+DURATION][xSEVERITY],"
                         " e.g. cooling:node-01/3@2m+1h")
    if m["kind"] not in KINDS:
        raise ValueError(f"fault {spec!r}: unknown kind {m['kind']!r} (known: {', '.join(KINDS)})")
    fault = Fault(m["kind"], m["node"], int(m["gpu"]),  # type: ignore[arg-type]
                  _seconds(m["start"]) if m["start"] else 60.0,
                  _seconds(m["dur"]) if m["dur"] else 3600.0,
                  float(m["sev"]) if m["sev"] else 2.0)
    if fault.severity <= 1.0:
        raise ValueError(f"fault {spec!r}: severity must be above 1 (times normal)")
    return fault
