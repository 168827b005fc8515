"""Every detector, through the alert lifecycle, on the simulated fleet's own frames."""

from __future__ import annotations

from fleetwatch.collectors.sim.faults import parse_fault
from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.config import DetectorsConfig
from fleetwatch.models.registry import build
from fleetwatch.pipeline.alerts import AlertBook

START = 1.7e9


def fired(hours: float, faults: list[str], seed: int = 0) -> list:
    sim = FleetSim(SimParams(nodes=16, gpus=8, nodes_per_rack=4, interval_s=5.0, seed=seed),
                   START, [parse_fault(f) for f in faults])
    detectors, book, firing = build(DetectorsConfig()), AlertBook(), []
    for _ in range(int(hours * 3600 / 5.0)):
        sim.step()
        frames = sim.frames()
        findings = [x for d in detectors for x in d.update(frames)]
        firing += [a for a in book.observe(frames, findings) if a.state == "firing"]
    return firing


def test_a_healthy_simulated_fleet_raises_no_alert() -> None:
    assert [(a.rule, a.node, a.device) for a in fired(2.0, [])] == []


def test_a_cooling_fault_fires_on_that_gpu_within_minutes_and_nowhere_else() -> None:
    firing = fired(1.5, ["cooling:node-005/3@60m+20m"])
    assert firing
    assert {(a.node, a.device) for a in firing} == {("node-005", "gpu3")}
    assert min(a.fired_ts for a in firing) - (START + 60 * 60) <= 5 * 60
