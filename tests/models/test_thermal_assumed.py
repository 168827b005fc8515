"""A GPU judged against config's fallback limits (no NVML threshold, a part whose limits
fleetwatch does not know) is told so in the alert's message and evidence: 87 °C is an
assumption, not the GPU's slowdown temperature."""

from __future__ import annotations

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.thermal import LIMITS_ASSUMED, ThermalLimits
from tests.models.helpers import busy, node, rules


def test_a_fallback_limit_is_said_to_be_assumed() -> None:
    found = ThermalLimits().update([node(0, [busy(88.0)], model="Some GPU X")])
    assert rules(found) == [("gpu_temp_critical", 0), ("gpu_temp_high", 0)]
    for f in found:
        assert f.evidence[LIMITS_ASSUMED] == 1.0
        assert f.evidence["slowdown_c"] == 87.0 and f.evidence["shutdown_c"] == 92.0
        assert "its assumed slowdown temperature 87 °C" in f.message
        assert "fleetwatch knows none for Some GPU X" in f.message
        assert "detectors.fallback_slowdown_c" in f.message


def test_the_gpus_own_and_a_known_parts_limits_are_not_assumed() -> None:
    own = ThermalLimits().update([node(0, [busy(88.0, gpu_slowdown_temp_c=87.0,
                                                   gpu_shutdown_temp_c=92.0)],
                                       model="Some GPU X")])
    part = ThermalLimits().update([node(0, [busy(90.0)], model="NVIDIA A100-SXM4-80GB")])
    for f in own + part:
        assert LIMITS_ASSUMED not in f.evidence and "assumed" not in f.message, f.message
    assert "its slowdown temperature 89 °C" in part[0].message


def test_a_frame_that_names_no_model_says_so() -> None:
    found = ThermalLimits(DetectorsConfig(fallback_slowdown_c=80.0)).update(
        [node(0, [busy(81.0)], model="")])
    assert found and "the GPU names no model" in found[0].message
