"""The peer rule on series shaped like real ones: whole-degree readings at 1, 5 and 15 s.

NVML reads the die in whole degrees, and dcgm-exporter scrapes every 5 s (Prometheus often
every 15 s). One reading step of +1 °C on a GPU while its peers' median steps -1 °C moves
its excess by 2 °C in one sample: no climb, and no critical page.
"""

from __future__ import annotations

from fleetwatch.models.peers import ThermalPeers
from tests.models.helpers import busy, node

PEERS = [65.0, 67.0, 66.0, 65.0, 66.0, 67.0, 66.0]    # GPUs 1-7, median 66 °C
LIMITS = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0}


def feed(d: ThermalPeers, temps_at, start: float, seconds: float, step: float) -> list:
    found: list = []
    for k in range(int(seconds / step)):
        t = start + k * step
        found += d.update([node(t, [busy(x, **LIMITS) for x in temps_at(t)])])
    return found


def learned(step: float) -> ThermalPeers:
    """A node after its warm-up, GPU 0 running 3 °C over its peers' median (its way)."""
    d = ThermalPeers()
    assert feed(d, lambda t: [69.0] + PEERS, 0.0, 1800.0, step) == []
    return d


def test_a_sensor_stuck_at_255_c_is_left_out_of_the_peer_rule_and_not_learned() -> None:
    """A reading over shutdown + sensor_over_shutdown_c is no temperature (thermal_limits
    raises gpu_temp_sensor_invalid for it): no cooling page, and nothing learned from it."""
    step = 5.0
    d = learned(step)
    stuck = feed(d, lambda t: [255.0] + PEERS, 1800.0, 600.0, step)
    assert stuck == []
    # GPU 1-7 still judge each other without it; after the sensor recovers, GPU 0 is
    # judged as it was learned before (its 3 °C are still its way).
    after = feed(d, lambda t: [69.0] + PEERS, 2400.0, 600.0, step)
    assert after == []
    assert feed(d, lambda t: [78.0] + PEERS, 3000.0, 60.0, step)   # a real fault still pages


def test_a_reading_just_under_the_invalid_bound_is_still_a_temperature() -> None:
    d = learned(5.0)
    found = feed(d, lambda t: [100.0] + PEERS, 1800.0, 30.0, 5.0)   # shutdown 92 + 10 = 102
    assert {f.rule for f in found} >= {"gpu_hot_vs_peers_critical"}
