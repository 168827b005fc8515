"""What a GPU part is rated for, by its NVML product name (``nvmlDeviceGetName``).

Thermal design power (TDP), the "Max thermal design power" of NVIDIA's data
sheets. Where a data sheet gives a configurable range (H100 PCIe 300-350 W,
H100 NVL 350-400 W, H200 NVL up to 600 W) the table holds its top. A part not
in the table has no rated TDP here: its callers fall back to what the GPU
itself reports (its enforced power limit).
"""

from __future__ import annotations

import functools

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


@functools.lru_cache(maxsize=256)
def tdp_w(model: str) -> float | None:
    """The part's TDP in W, or None for a product name not in the table."""
    name = model.lower()
    for key, watts in TDP_W:
        if key in name:
            return watts
    return None
