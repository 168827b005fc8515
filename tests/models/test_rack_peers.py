"""A rack far above its peer racks' inlet air (same cluster, same time) is found from the
first samples, without a history of its own: a processor that starts (a deploy, a crash)
while a rack's cooler fails must page that rack, not each of its GPUs."""

from __future__ import annotations

from dataclasses import replace

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import HostReading
from fleetwatch.models.rack import RackCooling
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.sinks.am_payload import am_annotations
from tests.models.helpers import busy, node

RACKS = {f"rack-{r:02d}": [f"r{r}n{i}" for i in range(4)] for r in range(6)}
ROOM = {name: 22.0 + 0.6 * r + 0.1 * i for r, names in enumerate(RACKS.values())
        for i, name in enumerate(names)}


def fleet(t: float, air: dict[str, float], cluster: str = "c1") -> list:
    """Every rack's busy nodes, GPUs still; each node's inlet air from ``air``."""
    return [replace(node(t, [busy(60.0 + 0.3 * i) for i in range(8)], name=name, rack=rack),
                    cluster=cluster, host=HostReading({"host_inlet_temp_c": air[name]}))
            for rack, names in RACKS.items() for name in names]


def failing(t: float, onset: float, rate_c_per_min: float = 7.5, top_c: float = 15.0
            ) -> dict[str, float]:
    """rack-02's cooler stops at ``onset``: its air warms by ``rate`` a minute to ``top``."""
    add = min(top_c, max(0.0, t - onset) * rate_c_per_min / 60.0)
    return {n: v + (add if n.startswith("r2") else 0.0) for n, v in ROOM.items()}


def test_a_rack_far_above_its_peers_pages_within_the_first_minutes_of_a_processor() -> None:
    d = RackCooling()
    found, t = [], 0.0
    while t < 240.0 and not found:  # the cooler fails 60 s after the processor starts
        found = d.update(fleet(t, failing(t, onset=60.0)))
        t += 5.0
    assert [(f.rule, f.rack, f.scope) for f in found] == [("rack_cooling", "rack-02", "rack")]
    # 8 °C (detectors.rack_inlet_peer_c) at 7.5 °C a minute: 64 s after the onset.
    assert t - 5.0 - 60.0 <= 70.0
    ev = found[0].evidence
    assert ev["nodes_inlet_above_peers"] >= 3 and ev["nodes_inlet_peers_judged"] == 4
    assert 8.0 <= ev["inlet_over_peers_c"] <= 9.0
    assert "above the other racks'" in found[0].message
    # Since: when the rack's excess began as far as the samples show, not now.
    assert 60.0 <= found[0].since <= 60.0 + 25.0
    # Held while it lasts, with the excess over the peers as its value.
    for _ in range(60):
        found = d.update(fleet(t, failing(t, onset=60.0)))
        t += 5.0
    assert [f.rack for f in found] == ["rack-02"]
    assert found[0].evidence["inlet_over_peers_c"] >= 14.0
    assert 60.0 <= found[0].since <= 60.0 + 25.0  # it stays where the excess began


def test_racks_apart_by_their_usual_spread_or_a_room_warming_are_not_found() -> None:
    d = RackCooling()
    t = 0.0
    for k in range(720):  # an hour: racks 3 °C apart, the room warming 4 °C
        air = {n: v + 4.0 * k / 720 + 0.2 * ((k + i) % 3 - 1)
               for i, (n, v) in enumerate(ROOM.items())}
        assert d.update(fleet(t, air)) == []
        t += 5.0


def test_the_peer_comparison_needs_three_other_racks_of_the_same_cluster() -> None:
    d = RackCooling()
    hot = {n: v + (15.0 if n.startswith("r2") else 0.0) for n, v in ROOM.items()}
    # Two racks in each of three clusters: no rack has three peers of its own cluster.
    names = list(RACKS)
    for t in (0.0, 5.0, 10.0):
        frames = fleet(t, hot)
        frames = [replace(f, cluster=f"c{names.index(f.rack) // 2}") for f in frames]
        assert d.update(frames) == []


def test_a_rack_hot_from_the_start_is_a_warning_that_names_it_not_a_page() -> None:
    """A rack above its peers from the first sample fleetwatch has of it is a hot aisle or a
    failure older than the data: the two cannot be told apart, so it is said (warning, the
    rack named) without paging, and without muting its GPUs' alerts (only a critical rack
    alert inhibits them), however long it stays so."""
    d = RackCooling(DetectorsConfig())
    hot = {n: v + (9.0 if n.startswith("r2") else 0.0) for n, v in ROOM.items()}
    t, found = 100.0, []
    for _ in range(3 * 720):  # three hours, steady
        found = d.update(fleet(t, hot))
        assert [(f.rack, f.severity) for f in found] == [("rack-02", "warning")], t
        t += 5.0
    assert "since fleetwatch's first sample" in found[0].message


def test_a_steady_hot_rack_that_then_warms_further_pages() -> None:
    d = RackCooling(DetectorsConfig())
    t = 0.0
    for _ in range(400):  # 9 °C above from the start, then its cooler fails at t=1000
        add = 9.0 + min(8.0, max(0.0, t - 1000.0) * 7.5 / 60.0)
        air = {n: v + (add if n.startswith("r2") else 0.0) for n, v in ROOM.items()}
        found = d.update(fleet(t, air))
        if t < 1000.0:
            assert [f.severity for f in found] == ["warning"]
        t += 5.0
    assert [(f.rack, f.severity) for f in found] == [("rack-02", "critical")]


def test_only_a_critical_rack_alert_inhibits_the_gpu_alerts_of_its_rack() -> None:
    from fleetwatch.pipeline.inhibition import inhibited_by
    from fleetwatch.pipeline.store.base import Alert

    def alert(rule: str, severity: str, node: str, device: str) -> Alert:
        return Alert(f"{rule}/c/{node}/{device}/1", rule, severity, "c1", "rack-02", node,
                     device, "firing", 1.0, 1.0, 1.0, "", fired_ts=1.0)
    gpu = alert("gpu_temp_critical", "critical", "r2n0", "gpu0")
    warm = alert("rack_cooling", "warning", "", "rack:rack-02")
    failing_rack = alert("rack_cooling", "critical", "", "rack:rack-02")
    assert inhibited_by(gpu, [warm]) == ""
    assert inhibited_by(gpu, [failing_rack]) == failing_rack.id


def test_the_rack_alert_starts_where_the_excess_began_and_says_so() -> None:
    """Detector -> alert lifecycle -> Alertmanager annotations: the alert started when the
    rack's air left its peers', and its description says since when."""
    d, book = RackCooling(), AlertBook(requirements=dict(RackCooling.rules))
    fired, t = [], 0.0
    while t < 240.0 and not fired:
        frames = fleet(t, failing(t, onset=60.0))
        changes = book.observe(frames, d.update(frames))
        book.apply(changes)
        fired = [a for a in changes if a.state == "firing"]
        t += 5.0
    (alert,) = fired
    assert alert.rule == "rack_cooling" and alert.device == "rack:rack-02"
    assert 60.0 <= alert.started_ts <= 85.0 < alert.fired_ts
    text = am_annotations(alert)
    assert "above the other racks'" in text["summary"]
    assert "began 1970-01-01T00:01:" in text["description"]
    assert "inlet_over_peers_c=8." in text["evidence"]
