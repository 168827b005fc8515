"""A warm spell: the whole room's air rising 10 °C over 6 hours, every rack alike (the
simulator's ``warm_spell_c``). The GPU models have no input for the air: each rack's
models lag the room by their own learning speed, and once the ramp stopped, the racks
that had caught up moved the room's share down under the one that had not, which paged
``rack_cooling`` for 2.8 h. The room's air, read from the nodes' inlet sensors across
the cluster's racks, is taken out of every GPU's temperature before its model."""

from __future__ import annotations

from fleetwatch.collectors.sim.faults import parse_fault
from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.models.rack import RackCooling

START = 1_795_000_000.0 - 86_400.0


def run(hours: float, **room: float) -> list[tuple[str, str, float]]:
    sim = FleetSim(SimParams(nodes=16, gpus=8, part="a100", **room), START)
    d, found = RackCooling(), []
    for _ in range(int(hours * 3600 / 60)):
        frames = []
        for _ in range(4):  # 15 s samples in batches of one minute, as simulate does
            sim.step()
            frames += sim.frames()
        found += [(f.rule, f.rack or f.node, (f.ts - START) / 3600) for f in d.update(frames)]
    return found


def test_the_whole_room_warming_over_hours_pages_no_rack_and_no_node() -> None:
    found = run(9.0, warm_spell_c=10.0, warm_spell_h=6.0)
    assert found == [], sorted({(r, w, round(t, 1)) for r, w, t in found})[:5]


def test_one_racks_cooler_failing_while_the_room_warms_is_still_found() -> None:
    """The room's share is the median across racks: one rack's cooler is not the room."""
    fault = parse_fault("rack_cooling:rack-02@2h30m+1h~drift")
    sim = FleetSim(SimParams(nodes=16, gpus=8, part="a100", warm_spell_c=4.0,
                             warm_spell_h=2.0), START, [fault])
    d, found = RackCooling(), []
    for _ in range(int(3.5 * 60)):
        frames = []
        for _ in range(4):
            sim.step()
            frames += sim.frames()
        found += [(f.rack, (f.ts - START) / 3600) for f in d.update(frames)
                  if f.rule == "rack_cooling"]
    assert {r for r, _ in found} == {"rack-02"}
    assert min(t for _, t in found) < 3.0
