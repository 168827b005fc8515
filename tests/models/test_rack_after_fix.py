"""A rack's cooler fixed: its finding clears once its inlet air is back with the other
racks' air now, not with its own level before it was flagged. That level stood still
while the rack was flagged, so the room's drift since (its daily swing, a warm spell)
read as the rack's own fault for one or two hours after the repair, and the stale
finding muted new GPU faults in the rack (``explains``)."""

from __future__ import annotations

import pytest

from fleetwatch.collectors.sim.faults import parse_fault
from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.models.rack import RackCooling

# 2022-05-17 02:00 UTC, as the facilities run: the fault 05:00 to 08:00 spans the
# room's daily swing upward.
START = 1_652_752_800.0


def run(nodes: int, warm_c: float, hours: float) -> tuple[dict[str, list[float]], RackCooling]:
    faults = [parse_fault(f"rack_cooling:{r}@3h+3h~sudden") for r in ("rack-00", "rack-01")]
    sim = FleetSim(SimParams(nodes=nodes, gpus=4, nodes_per_rack=2, seed=7, part="a100",
                             warm_spell_c=warm_c, warm_spell_h=6.0), START, faults)
    d, found = RackCooling(), {}
    for _ in range(int(hours * 60)):
        frames = []
        for _ in range(4):  # 15 s samples in batches of one minute, as simulate does
            sim.step()
            frames += sim.frames()
        for f in d.update(frames):
            found.setdefault(f.rack if f.rule == "rack_cooling" else f.node, []).append(
                (f.ts - START) / 3600)
    return found, d


@pytest.mark.parametrize(("nodes", "warm_c"), [(8, 8.0), (16, 0.0)])
def test_a_rack_clears_within_minutes_of_its_air_back_with_its_peers(nodes: int,
                                                                      warm_c: float) -> None:
    found, d = run(nodes, warm_c, 6.75)
    for rack in ("rack-00", "rack-01"):
        times = found.get(rack, [])
        assert times and min(times) < 3.05, (rack, times[:3])  # caught at once
        assert max(times) < 6.25, (rack, max(times))  # fixed at 6 h: clear by 6 h 15
        assert not d.explains("sim", rack, f"node-00{0 if rack == 'rack-00' else 2}")
    # Nor does a node of the rack take over once it clears: its GPUs' models stood still
    # while the room warmed, with fewer than three other racks to read the room from.
    assert set(found) == {"rack-00", "rack-01"}, {k: v[:2] for k, v in found.items()}


def test_a_rack_clears_at_the_repair_though_it_wandered_from_its_one_peer_rack() -> None:
    """16 nodes in 8 racks (seed 4, as `fleetwatch simulate --seed 4`): over the 2 h fault
    rack-00's air and its peers' wandered about 1 °C apart, more than the half line its
    usual place among them holds it to, while its air was back at its own level before
    the flag: the finding held 11 min after the repair (resolved 15 min after it, against
    the previous release's 5). Back at either, it clears: within two minutes."""
    start = 1_795_795_508.0  # 2026-11-27 15:25:08 UTC, that run's start
    sim = FleetSim(SimParams(nodes=16, gpus=8, seed=4, interval_s=30.0), start,
                   [parse_fault("rack_cooling:rack-00@1h+2h")])
    d, last = RackCooling(), 0.0
    for _ in range(int(3.5 * 3600 / 60)):
        frames = []
        for _ in range(2):  # 30 s samples in batches of one minute
            sim.step()
            frames += sim.frames()
        for f in d.update(frames):
            if f.rule == "rack_cooling" and f.rack == "rack-00":
                last = f.ts - start
    assert 3 * 3600 - 60 <= last <= 3 * 3600 + 120, (last - 3 * 3600)
