"""Rack cooling on series built from physics (not from the simulator): healthy loads
whose power swings faster than samples come."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from fleetwatch.frame import HostReading
from fleetwatch.models import Finding
from fleetwatch.models.rack import RackCooling
from tests.models.helpers import busy, node

RACKS = {"rack-00": ("node-000", "node-001"), "rack-01": ("node-002", "node-003")}
TAU_S, RS, KD = 23.0, 0.075, 0.030  # heat sink: inlet + RS x P, through 23 s; die: KD x P
Air = Callable[[str, float], float]


def comp(t: float, shift: float) -> bool:
    """An LLM job's phases: 30 s compute, 30 s all-reduce."""
    return (t + shift) % 60.0 < 30.0


def replay(seconds: float, air: Air, *, swing: bool = False, mean_power: bool = False,
           inlet: bool = True, rs: Callable[[str, float], float] = lambda n, t: RS
           ) -> list[Finding]:
    """A100s of two racks, integrated each second and sampled every 5 s. Power as NVML
    gives it (the last second's) or as the mean over each sample (an energy-counter
    rate); the die's temperature is the instant's. Inlet air on every node's BMC sensor
    unless ``inlet`` is False."""
    rng = np.random.default_rng(3)
    names = [n for nodes in RACKS.values() for n in nodes]
    offset = rng.normal(0.0, 1.2, (len(names), 8))
    shift = np.tile(np.arange(8) % 4, (len(names), 1)).astype(float)
    power = np.full((len(names), 8), 420.0)
    sink = np.array([[air(n, 0.0) + RS * 62.0] * 8 for n in names])  # from idle
    total = np.zeros_like(sink)
    d, found = RackCooling(), []
    for t in range(int(seconds)):
        if swing:
            power = np.where(comp(t, shift), 420.0 * (1.0 + rng.normal(0.0, 0.03, power.shape)),
                             110.0 + rng.normal(0.0, 5.0, power.shape))
        else:
            power = 420.0 * (1.0 + rng.normal(0.0, 0.03, power.shape))
        goal = np.array([[air(n, t) + rs(n, t) * p for p in row] for n, row in zip(names, power)])
        sink += (goal - sink) / TAU_S
        total += power
        if t % 5 != 4:
            continue
        shown = total / 5.0 if mean_power else power
        total[:] = 0.0
        die = np.round(sink + KD * power + offset + rng.normal(0.0, 0.4, sink.shape))
        frames = []
        for i, name in enumerate(names):
            rack = next(r for r, nodes in RACKS.items() if name in nodes)
            f = node(float(t), [busy(float(die[i, g]), float(shown[i, g])) for g in range(8)],
                     name=name, rack=rack)
            if inlet:
                f = replace(f, host=HostReading(
                    {"host_inlet_temp_c": round(air(name, t) + rng.normal(0.0, 0.2), 1)}))
            frames.append(f)
        found += d.update(frames)
    return found


def test_a_healthy_swinging_load_never_pages_whichever_way_power_was_averaged() -> None:
    flat = lambda name, t: 24.0  # noqa: E731
    assert replay(2 * 3600, flat, swing=True) == []
    assert replay(2 * 3600, flat, swing=True, mean_power=True) == []
