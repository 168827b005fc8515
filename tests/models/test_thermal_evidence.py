"""Thermal health findings say, in °C, what was seen, what was expected and what fires."""

from __future__ import annotations

from fleetwatch.models.thermal_health import ThermalHealth, ThermalModel
from tests.models.test_thermal_hysteresis import Constant, frame


def findings(temps: list[float]) -> list:
    # Expects 50 °C; GPU 0 has a trained offset of +1 °C; the fleet's spread is 0.25 °C.
    model = ThermalModel(Constant(), "constant", {}, {"c/n/gpu0": 1.0, "c/n/gpu1": 0.0}, 0.25)
    health = ThermalHealth(model, half_life_s=1.0, min_excess_c=5.0, min_score=4.0,
                           warmup_s=0.0)
    found: list = []
    for k, temp in enumerate(temps):
        found += health.update([frame(15.0 * (k + 1), temp)])
    return found


def test_a_finding_carries_observed_expected_spread_and_thresholds() -> None:
    f = findings([59.0] * 20)[0]
    assert f.message == (
        "GPU 0 on n runs 8.0 °C hotter than its load and air explain, averaged over "
        "minutes (half-life 1 s): its smoothed residual +9.0 °C less its trained offset "
        "+1.0 °C (the latest sample alone: 59.0 °C against 51.0 °C expected); score 32.0 "
        "= that excess over the fleet's residual spread of 0.25 °C; fires at >= 5.0 °C and "
        "score >= 4.0")
    assert f.evidence == {"temp_c": 59.0, "expected_c": 51.0, "excess_c": 8.0,
                          "spread_c": 0.25, "score": 32.0, "fire_excess_c": 5.0,
                          "fire_score": 4.0, "residual_c": 9.0, "offset_c": 1.0,
                          "offset_online": 0.0}
    assert all(isinstance(v, float) for v in f.evidence.values())  # Alertmanager's {v:g}


def test_a_held_finding_says_it_holds_at_half_the_thresholds() -> None:
    f = findings([59.0] * 20 + [55.0] * 20)[-1]
    assert f.evidence["excess_c"] == 4.0 and f.evidence["fire_excess_c"] == 2.5
    assert f.message.endswith("holds while >= 2.5 °C and score >= 2.0")
