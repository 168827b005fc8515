"""Part data by NVML product name: a variant is matched before its family."""

from __future__ import annotations

import pytest

from fleetwatch.parts import tdp_w, thermal_limits_c


@pytest.mark.parametrize(("name", "watts"), [
    ("NVIDIA H100 80GB HBM3", 700.0), ("NVIDIA H100 PCIe", 350.0), ("NVIDIA H100 NVL", 400.0),
    ("NVIDIA H200", 700.0), ("NVIDIA H200 NVL", 600.0), ("NVIDIA A100-SXM4-80GB", 400.0),
    ("NVIDIA A100-PCIE-40GB", 250.0), ("NVIDIA A100 80GB PCIe", 300.0),
    ("NVIDIA L40S", 350.0), ("NVIDIA L40", 300.0), ("NVIDIA L4", 72.0), ("Tesla T4", 70.0),
    ("Tesla V100-SXM2-32GB", 300.0), ("Some GPU", None),
])
def test_tdp_by_product_name(name: str, watts: float | None) -> None:
    assert tdp_w(name) == watts


def test_thermal_limits_by_product_name() -> None:
    assert thermal_limits_c("NVIDIA H100 80GB HBM3") == (89.0, 95.0)   # what NVML reported
    assert thermal_limits_c("NVIDIA A100-SXM4-80GB") == (89.0, 92.0)
    assert thermal_limits_c("Tesla T4") == (93.0, 96.0)
    assert thermal_limits_c("NVIDIA A10G") == (95.0, 98.0)
    assert thermal_limits_c("Some GPU") is None


@pytest.mark.parametrize("name", [
    "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe",
    "NVIDIA H200", "NVIDIA L40S", "NVIDIA L4"])
def test_no_limits_are_lent_from_another_sku(name: str) -> None:
    """Limits only of the products a real capture gave: a PCIe or NVL card runs its own
    cooling and thresholds; its limits are assumed (and said so) until NVML gives them."""
    assert thermal_limits_c(name) is None
