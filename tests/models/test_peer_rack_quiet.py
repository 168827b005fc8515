"""Rack- and cluster-wide peers (models/peer_rack.py) are looked for only for GPUs with
too few peers in their node's job; a GPU that has none of its part in its rack either (an
H100 node in an A100 rack) made numpy warn "All-NaN slice encountered" through Python's
warnings into every processor's log, at each batch."""

from __future__ import annotations

import dataclasses
import warnings

from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.frame import Frame
from fleetwatch.models.peers import ThermalPeers

START = 1_652_752_800.0


def other_part(f: Frame) -> Frame:
    if f.node != "node-000":
        return f
    return dataclasses.replace(f, gpus=tuple(dataclasses.replace(g, model="NVIDIA H100 80GB HBM3")
                                             for g in f.gpus))


def test_a_gpu_with_no_peer_of_its_part_in_its_rack_warns_nothing() -> None:
    sim = FleetSim(SimParams(nodes=8, gpus=2, nodes_per_rack=4, seed=3, part="a100"), START)
    d = ThermalPeers()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(40):
            frames = []
            for _ in range(4):
                sim.step()
                frames += [other_part(f) for f in sim.frames()]
            d.update(frames)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert said == []
