"""The fake GPUs ``FakeNvml`` answers for: per-GPU answers as data, and the boards we model.

``FakeGpu`` holds one GPU's identity and its answers by NVML call, field id and GPM
metric, any of which may be an error; ``h100`` and ``l4`` build the two boards we model
from what real ones answer. ``FakeNvml`` (``fake.py``) serves them through the
``NvmlBackend`` interface.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pynvml

from fleetwatch.collectors.nvml import backend as b

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


@dataclass
class FakeGpu:
    """One fake GPU: identity, answers by method name, field values, GPM metrics."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    serial: str = "1650124014249"
    pci_bus_id: str = "00000000:18:00.0"
    answers: dict[str, Any] = field(default_factory=dict)
    # Field id -> value, or an NVML return code (int) wrapped in ``FieldError``.
    fields: dict[int, Any] = field(default_factory=dict)
    # GPM metric id -> percent; None: the GPU has no GPM (before Hopper).
    gpm: dict[int, float] | None = None
    pids: list[int] = field(default_factory=list)
    # MPS clients, as nvmlDeviceGetMPSComputeRunningProcesses lists them (``pids`` then
    # holds the MPS server, as the plain list does).
    mps_pids: list[int] = field(default_factory=list)
    nvlinks: int = 0
    # Field id -> units per second: cumulative counters that advance with time.
    field_rates: dict[int, float] = field(default_factory=dict)
    lost: bool = False
    # Every call on the GPU raises this (NVML_ERROR_UNKNOWN, TIMEOUT: a GPU that answers
    # nothing but is not GpuIsLost); its handle is still given out.
    error: Exception | None = None
    # nvmlDeviceGetHandleByIndex raises this for the GPU (one bad GPU at start).
    open_error: Exception | None = None
    # Method name -> seconds the call blocks before it answers (a GSP slow to answer RPCs).
    delays: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FieldError:
    """A per-field failure inside a successful nvmlDeviceGetFieldValues call."""

    code: int = NOT_SUPPORTED


def h100(index: int) -> FakeGpu:
    """An H100 SXM as a real one answers (values from nvidia-smi on an idle-ish node)."""
    bus = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)[index % 8]
    answers: dict[str, Any] = {
        "utilization": (87, 41),
        "memory": (85_520_809_984, 5_020_000_000, 79_900_000_000, 600_809_984),
        "power_usage_mw": 612_345,
        "power_limit_mw": 700_000,
        "power_default_limit_mw": 700_000,
        "temperature_c": 61,
        "temperature_threshold_c": {b.TEMP_THRESHOLD_SHUTDOWN: 92, b.TEMP_THRESHOLD_SLOWDOWN: 89},
        "clock_mhz": {b.CLOCK_SM: 1980, b.CLOCK_MEM: 2619},
        "clocks_event_reasons": 0,
        # SXM boards have no fan of their own.
        "fan_speed_pct": pynvml.NVMLError_NotSupported(),
        "pcie_throughput_kib_s": {b.PCIE_TX: 1_200, b.PCIE_RX: 3_400},
        "encoder_util_pct": 0,
        "decoder_util_pct": 0,
        "mig_mode": 0,
        "register_events": True,
        # Bare metal: NVML answers "no vGPU licensing here", as the real L4/L40S scrapes show.
        "grid_license": (False, False),
    }
    fields = {
        b.FI_ECC_SBE_VOL_TOTAL: 0, b.FI_ECC_DBE_VOL_TOTAL: 0,
        b.FI_ECC_SBE_AGG_TOTAL: 3, b.FI_ECC_DBE_AGG_TOTAL: 0,
        # Hopper retires rows, not pages.
        b.FI_RETIRED_SBE: FieldError(), b.FI_RETIRED_DBE: FieldError(),
        b.FI_RETIRED_PENDING: FieldError(),
        b.FI_NVLINK_CRC_FLIT_ERROR_TOTAL: 0, b.FI_NVLINK_REPLAY_ERROR_TOTAL: 0,
        b.FI_NVLINK_RECOVERY_ERROR_TOTAL: 0,
        b.FI_MEMORY_TEMP: 70, b.FI_TOTAL_ENERGY_MJ: 4_742_776_000 + index * 1000,
        b.FI_PCIE_REPLAY_COUNTER: 0,
        b.FI_NVLINK_THROUGHPUT_DATA_TX_KIB: 9_000_000,
        b.FI_NVLINK_THROUGHPUT_DATA_RX_KIB: 8_000_000,
        b.FI_NVLINK_THROUGHPUT_RAW_TX_KIB: 9_500_000,
        b.FI_NVLINK_THROUGHPUT_RAW_RX_KIB: 8_400_000,
        b.FI_REMAPPED_COR: 0, b.FI_REMAPPED_UNC: 0, b.FI_REMAPPED_PENDING: 0,
        b.FI_REMAPPED_FAILURE: 0,
        b.FI_PCIE_COUNT_TX_BYTES: 7_000_000_000, b.FI_PCIE_COUNT_RX_BYTES: 9_000_000_000,
    }
    gpm = {b.GPM_GRAPHICS_UTIL: 86.0, b.GPM_SM_UTIL: 78.5, b.GPM_SM_OCCUPANCY: 41.0,
           b.GPM_ANY_TENSOR_UTIL: 52.0, b.GPM_DRAM_BW_UTIL: 33.0}
    return FakeGpu(uuid=f"GPU-00000000-fake-4000-8000-{index:012x}",
                   pci_bus_id=f"00000000:{bus:02X}:00.0", serial=f"16501240142{index:02d}",
                   answers=answers, fields=fields, gpm=gpm, pids=[], nvlinks=18,
                   field_rates={b.FI_PCIE_COUNT_TX_BYTES: 1_228_800.0,
                                b.FI_PCIE_COUNT_RX_BYTES: 3_481_600.0})


def l4(index: int) -> FakeGpu:
    """An L4 (Ada, PCIe, GDDR6): no GPM, no NVLink, memory temperature answered as 0."""
    gpu = h100(index)
    gpu.name = "NVIDIA L4"
    gpu.gpm = None
    gpu.nvlinks = 0
    # Idle values of the real L4 in the kops dcgm-exporter scrape (shared/data), so a test
    # can compare our /metrics with it number for number.
    gpu.answers.update(memory=(24_152_899_584, 23_659_216_896, 0, 492_830_720),
                       utilization=(0, 0), temperature_c=31, power_usage_mw=16_365,
                       power_limit_mw=72_000, power_default_limit_mw=72_000,
                       clock_mhz={b.CLOCK_SM: 210, b.CLOCK_MEM: 405},
                       clocks_event_reasons=0x1, fan_speed_pct=pynvml.NVMLError_NotSupported())
    gpu.fields[b.FI_TOTAL_ENERGY_MJ] = 4_742_776
    for fid in (b.FI_NVLINK_CRC_FLIT_ERROR_TOTAL, b.FI_NVLINK_REPLAY_ERROR_TOTAL,
                b.FI_NVLINK_RECOVERY_ERROR_TOTAL, b.FI_NVLINK_THROUGHPUT_DATA_TX_KIB,
                b.FI_NVLINK_THROUGHPUT_DATA_RX_KIB, b.FI_NVLINK_THROUGHPUT_RAW_TX_KIB,
                b.FI_NVLINK_THROUGHPUT_RAW_RX_KIB,
                # A driver before R550: PCIe rates only from nvmlDeviceGetPcieThroughput.
                b.FI_PCIE_COUNT_TX_BYTES, b.FI_PCIE_COUNT_RX_BYTES):
        gpu.fields[fid] = FieldError()
    gpu.fields[b.FI_MEMORY_TEMP] = 0  # as the real L4/L40S scrapes show
    return gpu
