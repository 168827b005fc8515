"""Rack cooling on series built from physics (not from the simulator): a fleet whose
room air warms, and healthy loads whose power swings faster than samples come."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from fleetwatch.frame import HostReading
from fleetwatch.models import Finding
from fleetwatch.models.rack import RackCooling
from fleetwatch.models.rack_inlets import Inlets, median_of, others_median
from tests.models.helpers import busy, node

# Four racks: with fewer, a rise all racks share cannot be told from their coolers failing
# together (rack_inlets.MIN_SHARED), and is paged.
RACKS = {f"rack-0{r}": (f"node-{2 * r:03d}", f"node-{2 * r + 1:03d}") for r in range(4)}
TWO_RACKS = {r: RACKS[r] for r in ("rack-00", "rack-01")}
TAU_S, RS, KD = 23.0, 0.075, 0.030  # heat sink: inlet + RS x P, through 23 s; die: KD x P
Air = Callable[[str, float], float]


def comp(t: float, shift: float) -> bool:
    """An LLM job's phases: 30 s compute, 30 s all-reduce."""
    return (t + shift) % 60.0 < 30.0


def replay(seconds: float, air: Air, *, swing: bool = False, mean_power: bool = False,
           inlet: bool = True, rs: Callable[[str, float], float] = lambda n, t: RS,
           racks: dict[str, tuple[str, ...]] = RACKS) -> list[Finding]:
    """A100s of two racks, integrated each second and sampled every 5 s. Power as NVML
    gives it (the last second's) or as the mean over each sample (an energy-counter
    rate); the die's temperature is the instant's. Inlet air on every node's BMC sensor
    unless ``inlet`` is False."""
    rng = np.random.default_rng(3)
    names = [n for nodes in racks.values() for n in nodes]
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
            rack = next(r for r, nodes in racks.items() if name in nodes)
            f = node(float(t), [busy(float(die[i, g]), float(shown[i, g])) for g in range(8)],
                     name=name, rack=rack)
            if inlet:
                f = replace(f, host=HostReading(
                    {"host_inlet_temp_c": round(air(name, t) + rng.normal(0.0, 0.2), 1)}))
            frames.append(f)
        found += d.update(frames)
    return found


def summer(name: str, t: float) -> float:
    """A summer afternoon: every node's air from 25 to 35 °C over two hours."""
    return 25.0 + 10.0 * min(1.0, max(0.0, t - 1800.0) / 7200.0)


def test_the_whole_fleets_air_warming_is_no_racks_cooling() -> None:
    assert [f for f in replay(3 * 3600, summer) if f.rule == "rack_cooling"] == []


def test_the_whole_fleet_warming_without_inlet_sensors_is_no_racks_cooling() -> None:
    assert [f for f in replay(3 * 3600, summer, inlet=False)
            if f.rule == "rack_cooling"] == []


def test_one_racks_air_warming_slowly_is_still_that_racks_finding() -> None:
    def one(name: str, t: float) -> float:
        return summer(name, t) if name in RACKS["rack-00"] else 25.0
    found = [f for f in replay(2.5 * 3600, one) if f.rule == "rack_cooling"]
    assert {f.rack for f in found} == {"rack-00"}
    # No later than the GPU models alone found it before the inlet was judged (6159 s).
    assert min(f.ts for f in found) <= 6159.0


def test_one_racks_coolant_failing_is_found_while_the_fleets_air_warms() -> None:
    def coolant(name: str, t: float) -> float:  # rack-00's cold plates lose their flow
        return RS * (1.5 if name in RACKS["rack-00"] and t >= 5400.0 else 1.0)
    found = [f for f in replay(6000, summer, rs=coolant) if f.rule == "rack_cooling"]
    assert {f.rack for f in found} == {"rack-00"}
    assert min(f.ts for f in found) <= 5400.0 + 120.0


def test_a_healthy_swinging_load_never_pages_whichever_way_power_was_averaged() -> None:
    flat = lambda name, t: 24.0  # noqa: E731
    assert replay(2 * 3600, flat, swing=True) == []
    assert replay(2 * 3600, flat, swing=True, mean_power=True) == []


def test_others_median_leaves_each_key_out() -> None:
    # Fewer than three other racks: no rise is called the room's.
    assert others_median({1: 1.0}) == {}
    assert others_median({1: 1.0, 2: 5.0}) == {}
    assert others_median({1: 1.0, 2: 5.0, 3: 3.0, 4: 10.0}) == {1: 5.0, 2: 3.0, 3: 5.0, 4: 3.0}
    # A flagged rack's rise is its own cooler's, not the room's: never one of the others.
    assert others_median({1: 1.0, 2: 5.0, 3: 3.0, 4: 10.0, 5: 2.0}, {4}) == {
        1: 3.0, 2: 2.0, 3: 2.0, 4: 2.5, 5: 3.0}
    assert others_median({1: 1.0, 2: 5.0, 3: 3.0, 4: 10.0}, {4}) == {4: 3.0}
    assert others_median({1: 1.0, 2: 5.0}, {1}) == {}


def test_median_of_is_numpys_median_of_a_few_readings() -> None:
    rng = np.random.default_rng(7)
    for n in range(1, 12):
        for _ in range(50):
            values = rng.normal(25.0, 3.0, n).round(rng.integers(0, 3)).tolist()
            assert median_of(values) == float(np.median(values))
    assert np.isnan(median_of([]))


def test_each_racks_loose_peers_are_the_median_of_every_other_unflagged_rack() -> None:
    rng = np.random.default_rng(11)
    for n in range(1, 9):
        racks = {code: float(v) for code, v in enumerate(rng.normal(24.0, 2.0, n).round(1))}
        for flagged in ({}, {0}, {0, n - 1}, set(range(n))):
            want = {code: float(np.median(others)) for code in racks
                    if (others := [v for k, v in racks.items() if k != code and k not in flagged])}
            assert Inlets._loose_peers(racks, flagged) == want


def air_frames(t: float, jump: dict[str, float]) -> list:
    """Every rack's busy nodes, GPUs still; each rack's inlet air ``jump`` above 22 °C."""
    return [replace(node(t, [busy(60.0 + 0.3 * g) for g in range(8)], name=n, rack=rack),
                    host=HostReading({"host_inlet_temp_c": 22.0 + jump.get(rack, 0.0)}))
            for rack, nodes in RACKS.items() for n in nodes]


def test_every_racks_air_jumping_together_is_the_rooms_and_one_racks_still_pages_at_once(
        ) -> None:
    d = RackCooling()
    t = 0.0
    for _ in range(120):  # ten minutes of steady air
        assert d.update(air_frames(t, {})) == []
        t += 5.0
    assert d.update(air_frames(t, dict.fromkeys(RACKS, 3.0))) == []  # the chiller
    d = RackCooling()
    for t in np.arange(0.0, 600.0, 5.0):
        d.update(air_frames(t, {}))
    found = d.update(air_frames(600.0, {"rack-00": 3.0}))  # rack-00's cooler alone
    assert [(f.rule, f.rack) for f in found] == [("rack_cooling", "rack-00")]
    assert found[0].evidence["median_inlet_rise_c"] == 3.0


def failing(racks_from: dict[str, float]) -> Callable[[str, float], float]:
    """Each named rack's cooler failing at its time: its air 15 °C warmer within 2 min."""
    def air(name: str, t: float) -> float:
        rack = next(r for r, nodes in TWO_RACKS.items() if name in nodes)
        start = racks_from.get(rack)
        return 25.0 + (0.0 if start is None else 15.0 * min(1.0, max(0.0, t - start) / 120.0))
    return air


def test_in_a_two_rack_fleet_a_second_rack_failing_pages_at_once() -> None:
    """It was judged against the first rack's rise (its own cooler's) and paged 55 min late."""
    found = replay(4800, failing({"rack-00": 1800.0, "rack-01": 2100.0}), racks=TWO_RACKS)
    first = {r: min(f.ts for f in found if f.rule == "rack_cooling" and f.rack == r)
             for r in TWO_RACKS}
    assert first["rack-00"] <= 1800.0 + 180.0 and first["rack-01"] <= 2100.0 + 180.0
    # rack-00 holds while rack-01 fails too (it was resolved with its cooler still failed)
    late = [f for f in found if f.rule == "rack_cooling" and f.rack == "rack-00"
            and f.ts >= 4200.0]
    assert late


def test_in_a_two_rack_fleet_both_failing_at_once_both_page() -> None:
    found = replay(3000, failing({"rack-00": 1800.0, "rack-01": 1800.0}), racks=TWO_RACKS)
    first = {r: min((f.ts for f in found if f.rule == "rack_cooling" and f.rack == r),
                    default=None) for r in TWO_RACKS}
    assert all(ts is not None and ts <= 1800.0 + 180.0 for ts in first.values()), first
