"""Peers beyond the node: a small inference node (4 GPUs, two busy pods) leaves each busy
GPU too few GPUs at its power to compare with; the GPUs of its part at its power in its
rack (else, where every node reports its inlet air, its cluster) stand in, each at its
own node's inlet air."""

from __future__ import annotations

import dataclasses

from fleetwatch.frame import Frame, HostReading
from fleetwatch.models.peers import ThermalPeers
from tests.models.helpers import busy, node

HOT = {"gpu_hot_vs_peers", "gpu_hot_vs_peers_critical"}
STEP = 15.0
POWERS = [400.0, 380.0, 60.0, 60.0]           # two busy pods, two idle GPUs


def temp_at(p: float) -> float:
    return 25.0 + 0.1 * p


def frames(t: float, small_rack: str = "r1", small_inlet: float | None = 22.0,
           inlet: float | None = 22.0, fault_c: float = 0.0) -> list[Frame]:
    """Two 8-GPU training nodes (one job each, 400 W) in rack r1, and the small node
    ``small`` in ``small_rack``: its pods on GPUs 0 and 1, GPU 0 ``fault_c`` hotter. Each
    node's GPUs sit at its inlet air (``None``: it reports none; 22 °C where it does not)
    plus 0.1 °C/W."""
    out = []
    for k, name in enumerate(("train-a", "train-b")):
        temps = [temp_at(400.0) + (inlet or 22.0) - 22.0 + d
                 for d in (0, 1, -1, 0, 1, 0, -1, 0)]
        f = node(t, [busy(round(x), 400.0) for x in temps], name=name, rack="r1",
                 job=f"job-{k}")
        out.append(_with_inlet(f, inlet))
    air = (small_inlet or 22.0) - 22.0
    temps = [temp_at(p) + air + (fault_c if i == 0 else 0.0) for i, p in enumerate(POWERS)]
    f = node(t, [busy(round(x), p) for x, p in zip(temps, POWERS)], name="small",
             rack=small_rack, jobs=["pod:a", "pod:b", None, None])
    out.append(_with_inlet(f, small_inlet))
    return out


def _with_inlet(f: Frame, inlet: float | None) -> Frame:
    if inlet is None:
        return f
    return dataclasses.replace(f, host=HostReading({"host_inlet_temp_c": inlet}))


def feed(d: ThermalPeers, seconds: float, start: float = 0.0, fault_from: float | None = None,
         **kw) -> list:
    found, t = [], start
    while t < start + seconds:
        fault = 12.0 if fault_from is not None and t >= fault_from else 0.0
        found += d.update(frames(t, fault_c=fault, **kw))
        t += STEP
    return found


def small_hot(found: list) -> list:
    return [f for f in found if f.rule in HOT and f.node == "small"]


def test_a_failing_heat_path_on_a_small_inference_node_is_paged_against_its_rack() -> None:
    d = ThermalPeers()
    assert small_hot(feed(d, 1800)) == []
    found = small_hot(feed(d, 300, start=1800, fault_from=1800))
    assert found and {f.gpu for f in found} == {0}
    assert found[0].ts - 1800 <= 60
    assert found[0].evidence["peers_scope"] == 1
    assert "peers in its rack" in found[0].message


def test_a_small_node_in_warmer_air_is_not_paged_when_nodes_report_their_inlet() -> None:
    # Its air 4 °C warmer than the training nodes': each GPU is taken at its own air.
    d = ThermalPeers()
    assert small_hot(feed(d, 3 * 3600, small_inlet=26.0)) == []


def test_a_small_node_alone_in_its_rack_is_compared_with_its_cluster_by_inlet_air() -> None:
    d = ThermalPeers()
    assert small_hot(feed(d, 1800, small_rack="r2", small_inlet=25.0)) == []
    found = small_hot(feed(d, 300, start=1800, fault_from=1800, small_rack="r2",
                           small_inlet=25.0))
    assert found and found[0].evidence["peers_scope"] == 2
    assert "peers of its cluster" in found[0].message


def test_without_inlet_readings_other_racks_are_not_its_peers() -> None:
    d = ThermalPeers()
    found = feed(d, 2100, small_rack="r2", small_inlet=None, inlet=None, fault_from=1800)
    assert small_hot(found) == []
