"""The peer rule's learned offset depends on the GPU's power: a GPU whose heat path is a
little worse than its peers' (thermal resistance R a few percent higher), or whose air its
neighbours warm in proportion to their load, runs cool or level at low power and warm at
full power. Learned at one power, a constant offset pages it at the other; learned as a
function of power, it does not, while a heat path degrading at one power still pages."""

from __future__ import annotations

import math

import numpy as np

from fleetwatch.models import peer_offset
from fleetwatch.models.peers import ThermalPeers
from tests.models.test_peers import STEP, run

HOT = {"gpu_hot_vs_peers", "gpu_hot_vs_peers_critical"}
LOW_W, HIGH_W = 100.0, 450.0


def phases(first_s: float, phase_s: float):
    """Power of every GPU: LOW_W for ``first_s`` (its warm-up), then phases of ``phase_s``
    alternating HIGH_W and LOW_W (compute-bound, then communication-bound)."""
    def power(t: float) -> list[float]:
        if t < first_s:
            return [LOW_W] * 8
        return [HIGH_W if int((t - first_s) // phase_s) % 2 == 0 else LOW_W] * 8
    return power


def fleet(power, offset_at, fault=lambda t: 0.0):
    """Temperatures through a first-order lag toward 25 °C + 0.1 °C/W x power, GPU 0 plus
    ``offset_at(power)`` (its own heat path) plus ``fault(t)``; its peers spread a degree."""
    spread = [0.0, -0.5, 0.5, 0.0, -0.5, 0.5, 0.0, 0.3]
    temps = [25.0 + 0.1 * LOW_W + s for s in spread]
    temps[0] += offset_at(LOW_W)

    def temp(t: float) -> list[float]:
        p = power(t)[0]
        for i in range(8):
            target = 25.0 + 0.1 * p + spread[i] + (offset_at(p) + fault(t) if i == 0 else 0.0)
            temps[i] += (target - temps[i]) * (1.0 - math.exp(-STEP / 40.0))
        return [round(x) for x in temps]                         # NVML: whole degrees
    return temp


def steeper(p: float) -> float:
    """R 13 % above its peers' (0.013 °C/W on an A100's 0.10): -1.3 °C at 100 W, +3.2 at
    450 W, so 4.5 °C apart between the two phases."""
    return -2.6 + 0.013 * p


def test_a_gpu_cool_at_low_power_and_warm_at_full_power_is_not_paged() -> None:
    d = ThermalPeers()
    power = phases(1800.0, 900.0)
    found = [f for f in run(d, fleet(power, steeper), 8 * 3600, power_at=power)
             if f.rule in HOT]
    assert found == [], [(f.ts, f.message) for f in found[:3]]


def test_its_offset_is_reported_at_the_power_it_runs() -> None:
    d = ThermalPeers()
    power = phases(1800.0, 900.0)
    temp = fleet(power, steeper)
    t0 = 4 * 3600.0 + 300.0                          # five minutes into a full-power phase
    run(d, temp, t0, power_at=power)
    # Then its heat path fails at full power: the offset the alert allows is the one
    # learned for full power (warm), not the one at low power (cool).
    found = run(d, lambda t: [x + (12.0 if i == 0 else 0.0) for i, x in enumerate(temp(t))],
                300, start=t0, power_at=lambda t: [HIGH_W] * 8)
    found = [f for f in found if f.rule in HOT]
    assert found and {f.gpu for f in found} == {0}
    # (its slope is credited up to about 0.006 °C/W new to a power range: 2 °C of the 4.5
    # learned at 450 W, the rest of its warmth there over the day)
    assert 0.7 <= found[0].evidence["own_offset_c"] <= 4.5


def drift_delay(offset_at) -> float:
    """Seconds from onset to the first page of a heat path degrading at full power (R
    rising: its excess grows 0.5 °C a minute at the same power), after 4 h of phases."""
    d = ThermalPeers()
    power = phases(1800.0, 900.0)
    onset = 4 * 3600.0 + 60.0                        # a minute into a full-power phase
    fault = lambda t: max(0.0, t - onset) / 120.0    # noqa: E731
    found = [f for f in run(d, fleet(power, offset_at, fault), 4 * 3600 + 840, power_at=power)
             if f.rule in HOT and f.gpu == 0]
    return found[0].ts - onset if found else math.inf


def test_a_heat_path_degrading_at_full_power_pages_as_fast_as_on_a_gpu_without_offset(
) -> None:
    plain = drift_delay(lambda p: 0.0)
    warm = drift_delay(steeper)
    assert plain < 900
    # It runs 3.2 °C warm at full power, which is its own: the same degradation needs
    # about that much more to be out as far (0.5 °C/min: some 6 minutes), no more.
    assert warm <= plain + 420, (plain, warm)


# Heat paths of one part differ by some percent: GPU 0's 8 % above an A100's 0.10 °C/W, its
# peers' from 8 % below to level (their median 6 % below), so at 450 W GPU 0 runs 6.3 °C
# above their median, at 105 W 1.5 °C: all of them healthy.
SPREAD_C_PER_W = [0.008, -0.008, -0.006, -0.006, -0.006, -0.004, 0.0, -0.002]
SHORT_S, LONG_AT = 90.0, 5400.0


def short_phases(t: float) -> list[float]:
    """Busy at 105 W for half an hour (its warm-up), then full-power phases of SHORT_S
    (too short to settle in: never learned) every 4 minutes, then from LONG_AT one long."""
    if t < 1800.0 or (t < LONG_AT and (t - 1800.0) % 240.0 >= SHORT_S):
        return [105.0] * 8
    return [HIGH_W] * 8


def spread_node(fault=lambda t: 0.0):
    temps = [25.0 + (0.1 + r) * 105.0 for r in SPREAD_C_PER_W]

    def temp(t: float) -> list[float]:
        p = short_phases(t)[0]
        for i, r in enumerate(SPREAD_C_PER_W):
            target = 25.0 + (0.1 + r) * p + (fault(t) if i == 0 else 0.0)
            temps[i] += (target - temps[i]) * (1.0 - math.exp(-STEP / 40.0))
        return [round(x) for x in temps]
    return temp


def test_a_long_phase_at_a_power_never_learned_does_not_page_the_gpu_with_the_steeper_path(
) -> None:
    # Its offset at full power is not learned yet (each phase there was too short to
    # settle), nor its peers': the line from 105 W is right only to within how much heat
    # paths differ, and the first long phase there must not page it for that.
    found = [f for f in run(ThermalPeers(), spread_node(), LONG_AT + 900.0,
                            power_at=short_phases) if f.rule in HOT]
    assert found == [], [(f.ts, f.message) for f in found[:3]]


def test_a_heat_path_failing_in_that_long_phase_still_pages_within_a_minute() -> None:
    onset = LONG_AT + 120.0
    found = [f for f in run(ThermalPeers(), spread_node(lambda t: 15.0 * (t >= onset)),
                            LONG_AT + 600.0, power_at=short_phases)
             if f.rule in HOT and f.gpu == 0 and f.ts >= onset]
    assert found and found[0].ts - onset <= 60.0, [(f.ts, f.message) for f in found[:3]]


def test_the_offset_at_a_young_power_is_unsure_by_the_heat_paths_spread_until_learned(
) -> None:
    # Learned at 105 W (a full warm-up there); at 450 W nothing yet, then half of one.
    ev = np.zeros((3, peer_offset.BINS))
    pw = np.zeros((3, peer_offset.BINS))
    ev[:2, 1], pw[:2, 1] = 600.0, 105.0
    ev[1, 4], pw[1, 4] = 300.0, 450.0
    got = peer_offset.unsure(ev, pw, np.array([450.0, 450.0, 450.0]), 600.0, 0.006)
    # 0.006 °C/W x 345 W away; half as much once half learned; 0 with nothing learned.
    assert np.allclose(got, [2.07, 1.035, 0.0])
    # ... and 0 at the learned power itself.
    assert peer_offset.unsure(ev[:1], pw[:1], np.array([110.0]), 600.0, 0.006)[0] == 0.0
