"""The narrow NVML interface: only the calls fleetwatch makes, with their ids and types.

Both implementations, ``PynvmlBackend`` (``pynvml_backend.py``, the real driver) and
``FakeNvml`` (``fake.py``), raise pynvml's own ``NVMLError_*`` classes, so the reader's
single error mapping (``reader.classify``) treats a real driver and the fake alike. GPUs
are addressed by NVML index; the real backend keeps the handles. Units are NVML's: the
reader converts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# Field ids from nvml.h (nvmlFieldValue_t.fieldId), batched by nvmlDeviceGetFieldValues.
FI_ECC_SBE_VOL_TOTAL = 3
FI_ECC_DBE_VOL_TOTAL = 4
FI_ECC_SBE_AGG_TOTAL = 5
FI_ECC_DBE_AGG_TOTAL = 6
FI_RETIRED_SBE = 29
FI_RETIRED_DBE = 30
FI_RETIRED_PENDING = 31
FI_NVLINK_CRC_FLIT_ERROR_TOTAL = 38
FI_NVLINK_REPLAY_ERROR_TOTAL = 52
FI_NVLINK_RECOVERY_ERROR_TOTAL = 59
FI_MEMORY_TEMP = 82
FI_TOTAL_ENERGY_MJ = 83
FI_NVLINK_LINK_COUNT = 91
FI_PCIE_REPLAY_COUNTER = 94
FI_NVLINK_THROUGHPUT_DATA_TX_KIB = 138
FI_NVLINK_THROUGHPUT_DATA_RX_KIB = 139
# Data plus protocol overhead, KiB (nvml.h); their sum is our DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL.
FI_NVLINK_THROUGHPUT_RAW_TX_KIB = 140
FI_NVLINK_THROUGHPUT_RAW_RX_KIB = 141
# Cumulative PCIe byte counters (driver R550+): read in the batch, unlike
# nvmlDeviceGetPcieThroughput, which blocks ~20 ms per direction to sample a rate.
FI_PCIE_COUNT_TX_BYTES = 197
FI_PCIE_COUNT_RX_BYTES = 198
FI_REMAPPED_COR = 142
FI_REMAPPED_UNC = 143
FI_REMAPPED_PENDING = 144
FI_REMAPPED_FAILURE = 145
# nvml.h: "A scopeId of UINT_MAX returns aggregate value summed up across all links"
# for the NVLink throughput fields; scope 0 would be link 0 alone.
SCOPE_ALL_LINKS = 0xFFFFFFFF

# GPM metric ids (nvmlGpmMetricId_t); NVML returns each as a percent, 0.0 - 100.0.
GPM_GRAPHICS_UTIL = 1
GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_ANY_TENSOR_UTIL = 5
GPM_DRAM_BW_UTIL = 10

TEMP_THRESHOLD_SHUTDOWN = 0
TEMP_THRESHOLD_SLOWDOWN = 1
CLOCK_SM = 1
CLOCK_MEM = 2
PCIE_TX = 0
PCIE_RX = 1
EVENT_XID_CRITICAL = 0x8

NVML_SUCCESS = 0
UNKNOWN_PROFILE = "unknown"  # a MIG instance's profile where NVML refuses to name it

FieldResult = tuple[int, float]  # (NVML return code, value when the code is 0)


@dataclass(frozen=True)
class MigInstance:
    """One MIG device of a GPU, as NVML gives it (memory is all NVML answers per instance)."""

    gpu_instance: int       # nvmlDeviceGetGpuInstanceId: dcgm-exporter's GPU_I_ID
    compute_instance: int   # nvmlDeviceGetComputeInstanceId
    profile: str            # "1g.10gb": the profile name without NVML's "MIG " prefix
    uuid: str               # "MIG-..."
    fb_total: int           # bytes
    fb_free: int
    fb_used: int


class NvmlBackend(Protocol):
    """Every NVML call the agent makes. Raises ``pynvml.NVMLError`` subclasses."""

    def init(self) -> None:
        """nvmlInit_v2: no GPU is touched yet, so one bad GPU cannot fail it."""
    def shutdown(self) -> None:
        """nvmlShutdown, once for each init() that succeeded (NVML counts them)."""
    def driver_version(self) -> str: ...
    def device_count(self) -> int:
        """nvmlDeviceGetCount, asked again on each call (GPUs appear after a reset)."""
    def open(self, i: int) -> None:
        """nvmlDeviceGetHandleByIndex: attach GPU ``i``; raises for that GPU alone."""
    def uuid(self, i: int) -> str: ...
    def name(self, i: int) -> str: ...
    def serial(self, i: int) -> str: ...
    def pci_bus_id(self, i: int) -> str: ...
    def mig_mode(self, i: int) -> int: ...
    def utilization(self, i: int) -> tuple[int, int]:
        """(gpu %, memory copy %)."""
    def memory(self, i: int) -> tuple[int, int, int, int | None]:
        """(total, free, used, reserved) in bytes; reserved is None before nvmlMemory_v2."""
    def power_usage_mw(self, i: int) -> int: ...
    def power_limit_mw(self, i: int) -> int: ...
    def power_default_limit_mw(self, i: int) -> int: ...
    def temperature_c(self, i: int) -> int: ...
    def temperature_threshold_c(self, i: int, which: int) -> int: ...
    def clock_mhz(self, i: int, which: int) -> int: ...
    def clocks_event_reasons(self, i: int) -> int: ...
    def fan_speed_pct(self, i: int) -> int: ...
    def pcie_throughput_kib_s(self, i: int, counter: int) -> int: ...
    def encoder_util_pct(self, i: int) -> int: ...
    def decoder_util_pct(self, i: int) -> int: ...
    def nvlink_active(self, i: int, link: int) -> bool: ...
    def field_values(self, i: int, fields: Sequence[tuple[int, int]]) -> list[FieldResult]:
        """One nvmlDeviceGetFieldValues call; per-field failures come back as codes."""
    def gpm_supported(self, i: int) -> bool: ...
    def gpm_metrics(self, i: int, metric_ids: Sequence[int]) -> list[FieldResult]:
        """GPM metrics between the previous call and now; [] on the first call."""
    def compute_pids(self, i: int) -> list[int]:
        """The pids of the GPU's compute processes and, where the driver lists them, its
        MPS clients (the plain list shows the MPS server in their place)."""
    def mig_instances(self, i: int) -> list[MigInstance]:
        """The MIG devices of GPU ``i`` (MIG mode enabled), with their memory."""
    def grid_license(self, i: int) -> tuple[bool, bool]:
        """(vGPU licensing supported, a licensable feature is licensed) from
        nvmlDeviceGetGridLicensableFeatures."""
    def xid_events_open(self, indices: Sequence[int]) -> list[int]:
        """Register these GPUs for XID events (the event set is made on the first call);
        returns the indices that accepted. One GPU refusing does not affect the others;
        only a failure to make the event set raises."""
    def xid_events_drain(self, limit: int) -> list[tuple[int, int]]:
        """Pending (GPU index, XID) events, without waiting; at most ``limit``."""
