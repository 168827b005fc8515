"""What a GPU part is rated for, by its NVML product name (``nvmlDeviceGetName``).

Thermal limits, for readings without NVML's own thresholds (an older driver, a
recorded series): the slowdown and shutdown temperatures of real parts.

Thermal design power (TDP), the "Max thermal design power" of NVIDIA's data
sheets. Where a data sheet gives a configurable range (H100 PCIe 300-350 W,
H100 NVL 350-400 W, H200 NVL up to 600 W) the table holds its top. A part not
in the table has no rated TDP here: its callers fall back to what the GPU
itself reports (its enforced power limit).
"""

from __future__ import annotations

import functools

# (lower-case substring of the product name, slowdown °C, shutdown °C), from real
# nvidia-smi -q -x output (gpu_temp_slow_threshold, gpu_temp_max_threshold):
# A100-SXM4-80GB telegraf_a100-sxm4-v12.xml, A10G telegraf_a10g.xml, T4 telegraf_tesla-t4.xml,
# RTX 3090 telegraf_rtx-3090-v12.xml (tests/data/gpu_telemetry/nvidia_smi_xml). H100: NVML's
# own thresholds on a real H100 80GB HBM3 (tests/data/recorded); its driver-580 nvidia-smi
# gives them as T.Limit margins (max operating 87 °C, slowdown at -2, shutdown at -8).
# Each key names the product captured, not its family: an H100 PCIe or NVL, an A100 PCIe
# or SXM4-40GB, is another board with its own cooling and thresholds, which no capture here
# gives; their limits are assumed (detectors.fallback_*) and alerts say so. Add a part only
# from a real capture of it (NVML or nvidia-smi -q), cited here.
THERMAL_LIMITS_C: tuple[tuple[str, float, float], ...] = (
    ("a100-sxm4-80gb", 89.0, 92.0),
    ("h100 80gb hbm3", 89.0, 95.0),
    ("a10g", 95.0, 98.0),
    ("t4", 93.0, 96.0),
    ("rtx 3090", 95.0, 98.0),
)

# (lower-case substring of the product name, TDP in W); the first match wins, so a
# variant comes before its family ("h100 nvl" before "h100", "l40s" before "l4").
TDP_W: tuple[tuple[str, float], ...] = (
    ("h100 nvl", 400.0),
    ("h100 pcie", 350.0),
    ("h100", 700.0),          # SXM5: "NVIDIA H100 80GB HBM3"
    ("h200 nvl", 600.0),
    ("h200", 700.0),          # SXM: "NVIDIA H200"
    ("a100 80gb pcie", 300.0),
    ("a100-pcie", 250.0),     # "NVIDIA A100-PCIE-40GB"
    ("a100", 400.0),          # SXM4: "NVIDIA A100-SXM4-80GB", "...-40GB"
    ("l40s", 350.0),
    ("l40", 300.0),
    ("l4", 72.0),
    ("t4", 70.0),             # "Tesla T4"
    ("v100-sxm2", 300.0),
    ("v100-pcie", 250.0),
)


def _match(model: str, table: tuple[tuple, ...]) -> tuple | None:
    """The first row of ``table`` whose key (lower case) is in the product name."""
    name = model.lower()
    return next((row for row in table if row[0] in name), None)


@functools.lru_cache(maxsize=256)
def tdp_w(model: str) -> float | None:
    """The part's TDP in W, or None for a product name not in the table."""
    row = _match(model, TDP_W)
    return row[1] if row else None


@functools.lru_cache(maxsize=256)
def thermal_limits_c(model: str) -> tuple[float, float] | None:
    """The part's (slowdown, shutdown) in °C, or None for a product name not in the table."""
    row = _match(model, THERMAL_LIMITS_C)
    return (row[1], row[2]) if row else None
