"""The peer rule on series shaped like real ones: whole-degree readings at 1, 5 and 15 s.

NVML reads the die in whole degrees, and dcgm-exporter scrapes every 5 s (Prometheus often
every 15 s). One reading step of +1 °C on a GPU while its peers' median steps -1 °C moves
its excess by 2 °C in one sample: no climb, and no critical page.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.config import DetectorsConfig
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


@pytest.mark.parametrize("step", [1.0, 5.0])
def test_one_whole_degree_step_on_a_gpu_and_its_peers_is_no_critical_climb(step: float) -> None:
    """The tester's drift: GPU 0 warms 0.9 °C/min, to 5 °C over its peers; the sample in which
    its reading steps up a degree, its peers' readings step down one (median 66 -> 65)."""
    d = learned(step)
    t0 = 1800.0

    def temps(t: float) -> list[float]:
        gpu = min(71.0, 69.0 + np.floor((t - t0) * 0.9 / 60.0))   # 70 at 67 s, 71 at 133 s
        dip = 133.0 <= t - t0 < 133.0 + step                        # one sample, as it steps
        return [gpu + dip] + [p - dip for p in PEERS]

    found = feed(d, temps, t0, 600.0, step)
    assert [f for f in found if f.rule == "gpu_hot_vs_peers_critical"] == []


@pytest.mark.parametrize("step", [1.0, 5.0, 15.0])
def test_a_real_fast_climb_is_still_critical_and_its_evidence_shows_the_rise_that_fired(
        step: float) -> None:
    """A heat path failing at steady power: the GPU's sink climbs toward 25 °C more with the
    H100's 23 s time constant (a failing fan), read in whole degrees."""
    d = learned(step)
    t0 = 1800.0

    def temps(t: float) -> list[float]:
        return [69.0 + round(25.0 * (1.0 - np.exp(-(t - t0) / 23.0)))] + PEERS

    found = feed(d, temps, t0, 120.0, step)
    crit = [f for f in found if f.rule == "gpu_hot_vs_peers_critical"]
    assert crit and crit[0].ts <= t0 + max(15.0, 2 * step)
    ev = crit[0].evidence
    c = DetectorsConfig()
    # Fired by the excess or by the climb: the evidence shows which figure crossed its limit.
    assert ev["excess_c"] > c.peer_critical_c or (
        ev["excess_rise_c_per_min"] >= c.peer_rise_c_per_min and ev["climb_c"] > 2.0)


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


def test_noisy_whole_degree_readings_of_a_slow_drift_raise_no_critical_at_1_s() -> None:
    """The drift again, with each reading's noise (0.4 °C) rounded to whole degrees, scraped
    every second: its excess flickers by a degree or two from sample to sample."""
    rng = np.random.default_rng(1)
    offsets = rng.normal(0.0, 1.2, 8)
    d = ThermalPeers()
    found: list = []
    for k in range(3600):
        t = float(k)
        true = 60.0 + offsets + rng.normal(0.0, 0.4, 8)
        true[0] += min(6.0, 3.0 + max(0.0, t - 1800.0) * 0.9 / 60.0)   # 0.9 °C/min after 30 min
        found += d.update([node(t, [busy(float(round(x)), 160.0) for x in true])])
    assert [f for f in found if f.rule == "gpu_hot_vs_peers_critical"] == []


def test_at_15_s_a_heat_path_that_fails_at_once_is_critical_on_its_first_sample() -> None:
    """At a 15 s scrape a failed fan shows most of its climb in the first sample after it:
    8 °C at once, three times what reading steps can fake, is critical without waiting for
    a second sample (as fast as before the climb had to be held)."""
    d = learned(15.0)
    found = feed(d, lambda t: [77.0 + (t > 1800.0)] + PEERS, 1800.0, 45.0, 15.0)
    crit = [f for f in found if f.rule == "gpu_hot_vs_peers_critical"]
    assert crit and crit[0].ts == 1800.0
    assert crit[0].evidence["climb_c"] == 8.0 and crit[0].evidence["climb_s"] == 15.0
