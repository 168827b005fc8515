from __future__ import annotations

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


def test_one_hot_node_or_one_hot_gpu_is_not_a_rack_problem() -> None:
    d = RackCooling()
    run(d, 1200, 0, inlet_rise={})
    assert run(d, 300, 1200, inlet_rise={"n1": 10.0}) == []
    assert run(d, 300, 1500, inlet_rise={}, gpu0_rise=15.0) == []
