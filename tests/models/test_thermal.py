from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.config import DetectorsConfig
from fleetwatch.models.batch import columns
from fleetwatch.models.thermal import ThermalLimits
from fleetwatch.models.throttle import Throttle
from tests.models.helpers import busy, node, rules


def limits_at(temp: float, **metrics: float) -> list:
    return ThermalLimits().update([node(0, [busy(temp, **metrics)])])


def test_critical_at_the_gpus_own_slowdown_temperature_at_once() -> None:
    found = limits_at(87.0, gpu_slowdown_temp_c=87.0, gpu_shutdown_temp_c=90.0)
    assert rules(found) == [("gpu_temp_critical", 0), ("gpu_temp_high", 0)]
    f = found[0]
    assert f.severity == "critical" and f.for_s == 0
    # It keeps firing detectors.thermal_keep_firing_s once clear (a job phase is no cure).
    assert f.evidence == {"temp_c": 87.0, "slowdown_c": 87.0, "shutdown_c": 90.0,
                          "keep_firing_s": 1800.0}
    assert "cooling" in f.action


def test_a_critical_alert_held_below_the_limit_says_so() -> None:
    d = ThermalLimits()
    limits = {"gpu_slowdown_temp_c": 87.0, "gpu_shutdown_temp_c": 90.0}
    first = d.update([node(0, [busy(87.0, **limits)])])
    assert "at 87 °C, at or above its slowdown temperature 87 °C (shutdown 90 °C)" in (
        first[0].message)
    held = d.update([node(10, [busy(86.0, **limits)])])   # within the 2 °C hysteresis
    assert rules(held)[0] == ("gpu_temp_critical", 0)
    assert ("at 86 °C, 1 °C below (held until more than 2 °C under) its slowdown temperature "
            "87 °C") in held[0].message
    assert "at or above" not in held[0].message


def test_a_critical_gpu_past_its_shutdown_temperature_says_so() -> None:
    limits = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0}
    above = limits_at(95.0, **limits)
    assert rules(above)[0] == ("gpu_temp_critical", 0)
    assert above[0].message == ("GPU 0 on n1 at 95 °C, 3 °C above its shutdown temperature "
                                "92 °C (slowdown 89 °C)")
    at = limits_at(92.0, **limits)
    assert "at 92 °C, at its shutdown temperature 92 °C (slowdown 89 °C)" in at[0].message
    between = limits_at(90.0, **limits)
    assert "at 90 °C, at or above its slowdown temperature 89 °C (shutdown 92 °C)" in (
        between[0].message)


def test_limits_fall_back_to_the_model_family_then_to_config() -> None:
    a100 = ThermalLimits().update([node(0, [busy(88.0)], model="NVIDIA A100-SXM4-80GB")])
    assert rules(a100) == [("gpu_temp_high", 0)]               # A100 slows down at 89 °C
    other = ThermalLimits(DetectorsConfig(fallback_slowdown_c=80.0)).update(
        [node(0, [busy(81.0)], model="Some GPU")])
    assert rules(other)[0] == ("gpu_temp_critical", 0)


def test_each_gpu_of_a_batch_gets_its_own_models_limits_or_its_own_thresholds() -> None:
    d = ThermalLimits(DetectorsConfig(fallback_slowdown_c=80.0, fallback_shutdown_c=95.0))
    frames = [node(0, [busy(90.0), busy(90.0, gpu_slowdown_temp_c=91.0)], name="a",
                   model="NVIDIA A100-SXM4-80GB"),
              node(0, [busy(90.0), busy(81.0)], name="b", model="Tesla T4"),
              node(0, [busy(81.0), busy(79.0)], name="c", model="Some GPU")]
    slow, shut = d.limits(columns(frames), np.arange(3))
    by_node = {f.node: k for k, f in enumerate(columns(frames).frames)}
    a, b, c = (by_node[n] for n in "abc")
    assert slow[a].tolist() == [89.0, 91.0] and shut[a].tolist() == [92.0, 92.0]
    assert slow[b].tolist() == [93.0, 93.0] and shut[b].tolist() == [96.0, 96.0]
    assert slow[c].tolist() == [80.0, 80.0] and shut[c].tolist() == [95.0, 95.0]
    found = sorted((f.node, f.gpu, f.rule) for f in d.update(frames))
    assert ("a", 0, "gpu_temp_critical") in found and ("a", 1, "gpu_temp_critical") not in found
    assert ("c", 0, "gpu_temp_critical") in found and ("c", 1, "gpu_temp_critical") not in found
    assert not [f for f in found if f[0] == "b" and f[2] == "gpu_temp_critical"]


def test_high_is_a_warning_with_a_for_duration_and_has_hysteresis() -> None:
    d = ThermalLimits()
    lim = {"gpu_slowdown_temp_c": 90.0, "gpu_shutdown_temp_c": 92.0}
    assert rules(d.update([node(0, [busy(85.0, **lim)])])) == []
    hot = d.update([node(5, [busy(86.0, **lim)])])
    assert rules(hot) == [("gpu_temp_high", 0)] and hot[0].for_s == 30.0
    assert rules(d.update([node(10, [busy(85.0, **lim)])])) == [("gpu_temp_high", 0)]
    assert rules(d.update([node(15, [busy(83.0, **lim)])])) == []


def test_the_sites_own_limit_raises_gpu_temp_high_below_nvidias() -> None:
    """detectors.site_temp_limit_c: a site that wants to hear at 70 °C (liquid cooling, a
    hot aisle) gets gpu_temp_high there, with its own for-duration and hysteresis."""
    d = ThermalLimits(DetectorsConfig(site_temp_limit_c=70.0, site_temp_for_s=45.0))
    lim = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0}
    assert rules(d.update([node(0, [busy(69.0, **lim)], name="m")])) == []
    (hot,) = d.update([node(5, [busy(78.0, **lim)])])
    assert (hot.rule, hot.severity, hot.for_s) == ("gpu_temp_high", "warning", 45.0)
    assert hot.message == ("GPU 0 on n1 at 78 °C, at or above the site's limit 70 °C "
                           "(detectors.site_temp_limit_c); its slowdown temperature is 89 °C")
    assert hot.evidence["site_limit_c"] == 70.0
    assert rules(d.update([node(10, [busy(69.0, **lim)])])) == [("gpu_temp_high", 0)]  # held
    assert rules(d.update([node(15, [busy(67.0, **lim)])])) == []
    # Near slowdown, the slowdown margin's own alert (and for-duration) is the one raised.
    (near,) = d.update([node(200, [busy(86.0, **lim)], name="m")])
    assert near.for_s == 30.0 and "below its slowdown temperature" in near.message
    # No site limit (the default): 78 °C on an 89 °C part is no alert.
    assert rules(ThermalLimits().update([node(0, [busy(78.0, **lim)])])) == []


def test_hbm_has_its_own_limit() -> None:
    assert rules(limits_at(60.0, gpu_mem_temp_c=96.0)) == [("gpu_mem_temp_high", 0),
                                                            ("gpu_mem_temp_critical", 0)]
    assert rules(limits_at(60.0, gpu_mem_temp_c=91.0)) == [("gpu_mem_temp_high", 0)]
    assert rules(limits_at(60.0, gpu_mem_temp_c=85.0)) == []


@pytest.mark.parametrize("temp", [0.0, -5.0, 130.0])
def test_an_impossible_reading_is_a_failing_sensor_not_a_hot_gpu(temp: float) -> None:
    found = limits_at(temp, gpu_slowdown_temp_c=90.0, gpu_shutdown_temp_c=92.0)
    assert rules(found) == [("gpu_temp_sensor_invalid", 0)]


def test_rising_fast_toward_the_limit_warns_before_it_is_reached() -> None:
    d = ThermalLimits()
    lim = {"gpu_slowdown_temp_c": 90.0, "gpu_shutdown_temp_c": 92.0}
    found = []
    for k in range(12):                     # 1 °C a second from 70 °C, sampled every 2 s
        found += d.update([node(2.0 * k, [busy(70.0 + 2.0 * k, **lim)])])
    rising = [f for f in found if f.rule == "gpu_temp_rising"]
    assert rising and rising[0].ts <= 22.0
    assert rising[0].evidence["rise_c_per_min"] >= 20.0


def test_a_job_start_warming_a_gpu_to_a_normal_temperature_does_not_rise_alarm() -> None:
    d = ThermalLimits()
    lim = {"gpu_slowdown_temp_c": 90.0, "gpu_shutdown_temp_c": 92.0}
    temps = [30.0 + 40.0 * (1 - 2.718 ** (-t / 40.0)) for t in range(0, 300, 5)]
    found = [f for k, t in enumerate(temps) for f in d.update([node(5.0 * k, [busy(t, **lim)])])]
    assert found == []


def test_power_above_the_enforced_limit() -> None:
    found = limits_at(60.0, gpu_power_w=600.0, gpu_power_limit_w=500.0)
    assert rules(found) == [("gpu_power_over_limit", 0)] and found[0].for_s == 60.0
    assert limits_at(60.0, gpu_power_w=520.0, gpu_power_limit_w=500.0) == []


def test_hardware_slowdowns_are_critical_and_sw_thermal_a_warning() -> None:
    brake = THROTTLE_FLAGS["hw_power_brake_slowdown"]
    sw = THROTTLE_FLAGS["sw_thermal_slowdown"]
    cap = THROTTLE_FLAGS["sw_power_cap"]
    found = Throttle().update([node(0, [busy(60.0, gpu_throttle_reasons=brake),
                                        busy(60.0, gpu_throttle_reasons=sw),
                                        busy(60.0, gpu_throttle_reasons=cap),
                                        busy(60.0)])])
    assert rules(found) == [("gpu_hw_slowdown", 0), ("gpu_sw_thermal_slowdown", 1)]
    assert found[0].severity == "critical" and found[0].for_s == 10.0   # not a one-sample blip
    assert "power" in found[0].action and "hw_power_brake_slowdown" in found[0].message


def test_a_gpu_warming_fast_to_a_level_under_its_limit_is_not_rising_toward_it() -> None:
    """A heat sink approaching its level with a 23 s time constant (a real H100's) climbs
    20 °C/min and more inside the band below slowdown, on its way to 82 °C: no warning. The
    same climb toward 100 °C (its cooling gone) is one, before it reaches 85 °C."""
    lim = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 95.0}

    def run(level: float) -> list:
        d = ThermalLimits()
        temps = [60.0 + (level - 60.0) * (1 - 2.718 ** (-t / 23.0)) for t in range(0, 120, 2)]
        return [(2.0 * k, t, f) for k, t in enumerate(temps)
                for f in d.update([node(2.0 * k, [busy(round(t), gpu_power_w=500.0, **lim)])])
                if f.rule == "gpu_temp_rising"]

    assert run(82.0) == []
    failing = run(100.0)
    assert failing and failing[0][1] < 85.0
    assert failing[0][2].evidence["heading_c"] >= 89.0 and "heading for" in failing[0][2].message


def test_a_sample_without_power_is_no_step_in_the_rise() -> None:
    """The rise is judged on the die less its power's jump; a sample whose power reading is
    missing keeps the last power, so it does not read as a sudden climb."""
    d = ThermalLimits()
    lim = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 95.0}
    found = []
    for k in range(20):
        m = busy(80.0, gpu_power_w=500.0, **lim)
        if k == 12:
            del m["gpu_power_w"]
        found += [f for f in d.update([node(5.0 * k, [m])]) if f.rule == "gpu_temp_rising"]
    assert found == []
