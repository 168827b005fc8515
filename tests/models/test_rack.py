from __future__ import annotations

from dataclasses import replace

import pytest

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import HostReading
from fleetwatch.models.rack import RackCooling
from tests.models.helpers import busy, node

NODES = ["n1", "n2", "n3", "n4"]


def rack_frames(t: float, inlet_rise: dict[str, float], gpu0_rise: float = 0.0) -> list:
    frames = []
    for name in NODES:
        rise = inlet_rise.get(name, 0.0)
        temps = [60.0 + rise + (gpu0_rise if i == 0 else 0.0) + 0.3 * i for i in range(8)]
        frames.append(node(t, [busy(x) for x in temps], name=name, rack="rack-7"))
    return frames


def run(d: RackCooling, seconds: float, start: float, **kw) -> list:
    found = []
    t = start
    while t < start + seconds:
        found += d.update(rack_frames(t, **kw))
        t += 5.0
    return found


def test_a_rack_warming_together_is_one_rack_finding() -> None:
    d = RackCooling()
    assert run(d, 1200, 0, inlet_rise={}) == []
    found = run(d, 60, 1200, inlet_rise={n: 8.0 for n in NODES})
    assert found
    f = found[0]
    assert (f.scope, f.node, f.gpu, f.rack, f.rule) == ("rack", "", None, "rack-7", "rack_cooling")
    assert f.evidence["gpus_hot"] == 32 and f.evidence["nodes_hot"] == 4
    assert f.severity == "critical" and f.for_s == 0.0
    assert len({(x.rack, x.ts) for x in found}) == len(found)  # one per rack per batch


def test_one_hot_node_is_that_nodes_cooling_and_one_hot_gpu_neither() -> None:
    d = RackCooling()
    run(d, 1800, 0, inlet_rise={})  # node findings wait for models three warm-ups old
    found = run(d, 300, 1800, inlet_rise={"n1": 10.0})
    assert {(f.rule, f.scope, f.node, f.gpu) for f in found} == {
        ("node_cooling", "node", "n1", None)}
    assert found[0].evidence["gpus_hot"] == 8 and found[0].severity == "critical"
    assert run(d, 300, 2100, inlet_rise={}, gpu0_rise=15.0) == []
    # A whole rack warming is the rack's finding, not four node findings.
    assert {f.rule for f in run(d, 60, 2400, inlet_rise={n: 8.0 for n in NODES})} == {
        "rack_cooling"}


def test_a_node_is_not_judged_on_models_fresh_from_their_warm_up() -> None:
    d = RackCooling()
    run(d, 1200, 0, inlet_rise={})
    assert run(d, 300, 1200, inlet_rise={"n1": 10.0}) == []  # two warm-ups: too early


def inlet_frames(t: float, inlet: dict[str, float], rack: str = "rack-7",
                 nodes: list[str] = NODES) -> list:
    """Busy nodes whose GPUs sit still: only their inlet sensors move."""
    frames = []
    for name in nodes:
        f = node(t, [busy(60.0 + 0.3 * i) for i in range(8)], name=name, rack=rack)
        frames.append(replace(f, host=HostReading({"host_inlet_temp_c": inlet[name]})))
    return frames


def test_a_rack_whose_inlet_air_jumps_is_found_before_its_gpus_warm() -> None:
    d = RackCooling()
    t = 0.0
    for _ in range(120):  # ten minutes of steady air
        assert d.update(inlet_frames(t, {n: 22.0 + 0.1 * i for i, n in enumerate(NODES)})) == []
        t += 5.0
    # The cooler stops: three of four nodes read 2 °C warmer at the next sample.
    found = d.update(inlet_frames(t, {"n1": 24.0, "n2": 24.1, "n3": 24.2, "n4": 22.3}))
    assert [(f.rule, f.rack, f.scope) for f in found] == [("rack_cooling", "rack-7", "rack")]
    ev = found[0].evidence
    assert ev["nodes_inlet_warm"] == 3 and ev["nodes_inlet_judged"] == 4
    assert ev["median_inlet_rise_c"] == 2.0 and "gpus_hot" not in ev
    assert "inlet air of 3 of 4 nodes" in found[0].message


def test_inlet_noise_one_node_or_the_room_drifting_is_not_a_rack_finding() -> None:
    d = RackCooling()
    racks = {f"rack-{r}": [f"r{r}n{i}" for i in range(4)] for r in range(3)}
    t = 0.0

    def step(air: dict[str, float]) -> list:
        return [f for rack, names in racks.items()
                for f in d.update(inlet_frames(t, air, rack, names))]

    base = {n: 22.0 + 0.05 * i for names in racks.values() for i, n in enumerate(names)}
    for k in range(240):
        # sensor noise of a tenth of a degree: never a finding
        assert step({n: v + 0.1 * ((k + i) % 3 - 1) for i, (n, v) in enumerate(base.items())}) == []
        t += 5.0
    assert step({**base, "r0n0": base["r0n0"] + 5.0}) == []  # one node's sensor
    for k in range(1, 361):  # the room warms by 3 °C over half an hour
        t += 5.0
        assert step({n: v + 3.0 * k / 360 for n, v in base.items()}) == []
    t += 5.0
    # ... and then one rack's air 2 °C more within a sample.
    hot = {n: v + 3.0 + (2.0 if n.startswith("r1") else 0.0) for n, v in base.items()}
    assert [f.rack for f in step(hot)] == ["rack-1"]


def test_the_inlet_average_restarts_after_a_gap_and_ignores_impossible_readings() -> None:
    d = RackCooling()
    air = {n: 22.0 for n in NODES}
    for k in range(130):
        d.update(inlet_frames(5.0 * k, air))
    # Back after an hour at another level: a new average, not a jump.
    later = 5.0 * 130 + 3600.0
    assert d.update(inlet_frames(later, {n: 27.0 for n in NODES})) == []
    assert d.update(inlet_frames(later + 5, {n: float("nan") for n in NODES})) == []
    assert d.update(inlet_frames(later + 10, {n: 500.0 for n in NODES})) == []


def test_a_short_busy_phase_ending_is_not_a_cooling_finding() -> None:
    """Dies that follow power through a 45 s lag (the model assumes 30 s) after a busy phase of
    100 s that ends: the fast power average falls through the slow one, which still trails
    the rise, and for that one sample they agree. That is not "settled" (found at 5 s
    sampling: node_cooling on healthy nodes)."""
    import math

    import numpy as np

    rng = np.random.default_rng(7)
    gpus = 8
    offs = rng.normal(0.0, 0.8, (len(NODES), gpus))
    temp = np.full((len(NODES), gpus), 28.0) + offs

    def power_at(t: float) -> float:
        if t < 7200:  # history the models learn from: 10 minutes idle, 10 minutes busy
            return 60.0 if (t // 600) % 2 == 0 else 450.0
        if t < 7800:
            return 60.0
        if t < 7900:
            return 490.0  # a busy phase of 100 s
        return 125.0      # then a light one

    # A margin of 2 °C (the default is 4) makes the one sample's residual, 2 to 3 °C here, show.
    d, found, t, dt = RackCooling(DetectorsConfig(rack_margin_c=2.0)), [], 0.0, 5.0
    while t < 8400:
        p = power_at(t) + rng.normal(0.0, 2.0, (len(NODES), gpus))
        steady = 22.0 + 0.09 * p + offs
        temp = steady + (temp - steady) * math.exp(-dt / 45.0) + rng.normal(0.0, 0.2, temp.shape)
        frames = [node(t, [busy(round(float(temp[n, i])), float(p[n, i])) for i in range(gpus)],
                       name=name, rack="rack-7") for n, name in enumerate(NODES)]
        found += [(f.rule, f.node, f.ts) for f in d.update(frames)]
        t += dt
    assert found == []


def test_an_inlet_step_that_persists_stays_found_until_the_air_comes_back() -> None:
    """The inlet's usual level is not learned from the rise it is judging: a rack whose air
    stays 15 °C up for an hour is found for the whole hour, and clears once it is back."""
    d = RackCooling()
    normal = {n: 22.0 + 0.1 * i for i, n in enumerate(NODES)}
    t = 0.0
    for _ in range(240):
        assert d.update(inlet_frames(t, normal)) == []
        t += 5.0
    for _ in range(720):  # an hour 15 °C up
        found = d.update(inlet_frames(t, {n: v + 15.0 for n, v in normal.items()}))
        assert [f.rule for f in found] == ["rack_cooling"], t
        t += 5.0
    assert found[0].evidence["median_inlet_rise_c"] == pytest.approx(15.0, abs=0.2)
    cleared = []
    for _ in range(240):  # the cooler is back
        cleared.append(d.update(inlet_frames(t, normal)))
        t += 5.0
    assert cleared[0] == [] and all(f == [] for f in cleared)
    # ... and the average is learning again: a slow drift of the room is no finding.
    for k in range(1, 361):
        assert d.update(inlet_frames(t, {n: v + 3.0 * k / 360 for n, v in normal.items()})) == []
        t += 5.0


def test_a_node_is_not_found_while_its_racks_finding_holds() -> None:
    """The whole rack runs hot; one node more than the others, and the others' GPUs less
    than the margin for a while. The rack's cooling explains it: one rack finding, no
    node finding. A node clearly hotter than its rack once the rack is back is its own."""
    d = RackCooling()
    run(d, 1800, 0, inlet_rise={})
    found = run(d, 120, 1800, inlet_rise={n: 8.0 for n in NODES})
    assert {f.rule for f in found} == {"rack_cooling"}
    found = run(d, 300, 1920, inlet_rise={"n1": 10.0, "n2": 3.0, "n3": 3.0, "n4": 3.0})
    assert {(f.rule, f.node) for f in found} == {("rack_cooling", "")}
    # A rack whose other nodes are back to normal: n1 alone is hot, its own cooling.
    found = run(d, 300, 2220, inlet_rise={"n1": 10.0})
    assert {(f.rule, f.node) for f in found[-4:]} == {("node_cooling", "n1")}


def test_a_node_whose_gpus_all_read_255_c_is_no_cooling_fault_and_is_not_learned() -> None:
    """A driver fault can read 0xFF for every GPU of a node: no working GPU reads that
    (thermal_limits raises gpu_temp_sensor_invalid for each), so the node's and the rack's
    cooling are not paged for it, and the models learn nothing from it."""
    d = RackCooling()
    run(d, 1800, 0, inlet_rise={})
    stuck, t = [], 1800.0
    while t < 2400.0:
        frames = rack_frames(t, {})
        frames[0] = node(t, [busy(255.0)] * 8, name="n1", rack="rack-7")
        stuck += d.update(frames)
        t += 5.0
    assert stuck == []
    assert run(d, 600, 2400, inlet_rise={}) == []
    # The models are the ones learned before: a real cooling fault on n1 is still found.
    assert {f.rule for f in run(d, 300, 3000, inlet_rise={"n1": 10.0})} == {"node_cooling"}
