"""The narrow NVML interface: only the calls fleetwatch makes, and the real one over pynvml.

Both this backend and ``FakeNvml`` raise pynvml's own ``NVMLError_*`` classes,
so the reader's single error mapping (``reader.classify``) treats a real
driver and the fake alike. GPUs are addressed by NVML index; the real backend
keeps the handles. Units are NVML's: the reader converts them.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pynvml

log = logging.getLogger("fleetwatch.collectors.nvml.reader")

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


def _field_value(fv: Any) -> float:
    # c_nvmlValue_t is a union: the member to read depends on valueType.
    t = fv.valueType
    v = fv.value
    if t == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if t == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return float(v.uiVal)
    if t == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return float(v.ulVal)
    if t == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return float(v.sllVal)
    if t == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return float(v.siVal)
    if t == pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT:
        return float(v.usVal)
    return float(v.ullVal)


# Driver R535 renamed "clocks throttle reasons" to "clocks event reasons": the same call
# with the same bits (pynvml's nvmlClocksEventReason* and nvmlClocksThrottleReason* constants
# are equal, 0x1 GpuIdle .. 0x100 DisplayClockSetting). Bindings >= 12.535 offer both names,
# but each looks up its own C symbol, and libnvidia-ml.so before R535 exports only the old
# one (the new name answers FunctionNotFound there). Newest first; older bindings may lack
# the new name altogether.
_CLOCK_REASON_CALLS = tuple(
    f for f in (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None),
                pynvml.nvmlDeviceGetCurrentClocksThrottleReasons) if f is not None)


def _text(value: str | bytes) -> str:
    # pynvml returns str in recent releases and bytes in old ones.
    return value.decode() if isinstance(value, bytes) else value


class PynvmlBackend:
    """The real NVML, through NVIDIA's nvidia-ml-py bindings (module ``pynvml``)."""

    def __init__(self) -> None:
        self._h: dict[int, Any] = {}
        self._gpm: dict[int, list[Any]] = {}
        self._events: Any = None
        self._by_address: dict[int | None, int] = {}
        # The clock-reasons entry points this driver may have, the one that answered first.
        self._clock_reasons = _CLOCK_REASON_CALLS
        self._said_profile = False  # a refused MIG profile lookup, said once
        self._mps_list = True  # nvmlDeviceGetMPSComputeRunningProcesses answers here

    def init(self) -> None:
        # pynvml's nvmlInit is nvmlInit_v2: it attaches no GPU, so a GPU in a bad state
        # fails only its own nvmlDeviceGetHandleByIndex (open), not the others.
        pynvml.nvmlInit()
        self._clock_reasons = _CLOCK_REASON_CALLS  # the driver may have changed meanwhile

    def shutdown(self) -> None:
        try:
            for samples in self._gpm.values():
                for s in samples:
                    pynvml.nvmlGpmSampleFree(s)
            if self._events is not None:
                pynvml.nvmlEventSetFree(self._events)
        except pynvml.NVMLError:
            pass  # the driver is gone: nothing to free, but the shutdown below still counts
        finally:
            self._gpm.clear()
            self._events = None
            self._h.clear()
            self._by_address.clear()
            pynvml.nvmlShutdown()

    def driver_version(self) -> str:
        return _text(pynvml.nvmlSystemGetDriverVersion())

    def device_count(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    def open(self, i: int) -> None:
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        if self._h.pop(i, None) is not None:
            samples = self._gpm.pop(i, None)  # a GPU after a reset: start GPM afresh
            for s in samples or ():
                pynvml.nvmlGpmSampleFree(s)
        self._h[i] = h  # last in _h: the most recently opened
        # XID events name a GPU by its handle. After a reset GPUs can come back at other
        # indices, so index i's handle may be one another index held before it is opened
        # again: made afresh from the handles, the most recently opened index wins.
        self._by_address = {ctypes.cast(v, ctypes.c_void_p).value: k for k, v in self._h.items()}

    def uuid(self, i: int) -> str:
        return _text(pynvml.nvmlDeviceGetUUID(self._h[i]))

    def name(self, i: int) -> str:
        return _text(pynvml.nvmlDeviceGetName(self._h[i]))

    def serial(self, i: int) -> str:
        return _text(pynvml.nvmlDeviceGetSerial(self._h[i]))

    def pci_bus_id(self, i: int) -> str:
        return _text(pynvml.nvmlDeviceGetPciInfo(self._h[i]).busId)

    def mig_mode(self, i: int) -> int:
        return int(pynvml.nvmlDeviceGetMigMode(self._h[i])[0])

    def utilization(self, i: int) -> tuple[int, int]:
        u = pynvml.nvmlDeviceGetUtilizationRates(self._h[i])
        return u.gpu, u.memory

    def memory(self, i: int) -> tuple[int, int, int, int | None]:
        try:
            m = pynvml.nvmlDeviceGetMemoryInfo(self._h[i], version=pynvml.nvmlMemory_v2)
            return m.total, m.free, m.used, m.reserved
        except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch):
            m = pynvml.nvmlDeviceGetMemoryInfo(self._h[i])
            return m.total, m.free, m.used, None

    def power_usage_mw(self, i: int) -> int:
        return pynvml.nvmlDeviceGetPowerUsage(self._h[i])

    def power_limit_mw(self, i: int) -> int:
        return pynvml.nvmlDeviceGetEnforcedPowerLimit(self._h[i])

    def power_default_limit_mw(self, i: int) -> int:
        return pynvml.nvmlDeviceGetPowerManagementDefaultLimit(self._h[i])

    def temperature_c(self, i: int) -> int:
        return pynvml.nvmlDeviceGetTemperature(self._h[i], pynvml.NVML_TEMPERATURE_GPU)

    def temperature_threshold_c(self, i: int, which: int) -> int:
        return pynvml.nvmlDeviceGetTemperatureThreshold(self._h[i], which)

    def clock_mhz(self, i: int, which: int) -> int:
        return pynvml.nvmlDeviceGetClockInfo(self._h[i], which)

    def clocks_event_reasons(self, i: int) -> int:
        while True:
            call, *older = self._clock_reasons
            try:
                return int(call(self._h[i]))
            except pynvml.NVMLError_FunctionNotFound:
                if not older:  # no name this driver has: the reader makes it absent
                    raise
                self._clock_reasons = tuple(older)  # remembered for every GPU

    def fan_speed_pct(self, i: int) -> int:
        return pynvml.nvmlDeviceGetFanSpeed(self._h[i])

    def pcie_throughput_kib_s(self, i: int, counter: int) -> int:
        return pynvml.nvmlDeviceGetPcieThroughput(self._h[i], counter)

    def encoder_util_pct(self, i: int) -> int:
        return pynvml.nvmlDeviceGetEncoderUtilization(self._h[i])[0]

    def decoder_util_pct(self, i: int) -> int:
        return pynvml.nvmlDeviceGetDecoderUtilization(self._h[i])[0]

    def nvlink_active(self, i: int, link: int) -> bool:
        return pynvml.nvmlDeviceGetNvLinkState(self._h[i], link) == pynvml.NVML_FEATURE_ENABLED

    def field_values(self, i: int, fields: Sequence[tuple[int, int]]) -> list[FieldResult]:
        values = pynvml.nvmlDeviceGetFieldValues(self._h[i], list(fields))
        return [(fv.nvmlReturn, _field_value(fv) if fv.nvmlReturn == NVML_SUCCESS else 0.0)
                for fv in values]

    def gpm_supported(self, i: int) -> bool:
        if not hasattr(pynvml, "nvmlGpmQueryDeviceSupport"):  # bindings older than GPM
            return False
        return bool(pynvml.nvmlGpmQueryDeviceSupport(self._h[i]).isSupportedDevice)

    def gpm_metrics(self, i: int, metric_ids: Sequence[int]) -> list[FieldResult]:
        samples = self._gpm.get(i)
        if samples is None:
            samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
            try:
                pynvml.nvmlGpmSampleGet(self._h[i], samples[0])
            except pynvml.NVMLError:
                # Kept, a sample never filled would be the next call's "before".
                for s in samples:
                    pynvml.nvmlGpmSampleFree(s)
                raise
            self._gpm[i] = samples
            return []
        before, after = samples
        pynvml.nvmlGpmSampleGet(self._h[i], after)
        req = pynvml.c_nvmlGpmMetricsGet_t()
        req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(metric_ids)
        req.sample1, req.sample2 = before, after
        for k, mid in enumerate(metric_ids):
            req.metrics[k].metricId = mid
        pynvml.nvmlGpmMetricsGet(req)
        # The newer sample is the next interval's start: swap instead of re-allocating.
        samples.reverse()
        return [(req.metrics[k].nvmlReturn, req.metrics[k].value) for k in range(len(metric_ids))]

    def compute_pids(self, i: int) -> list[int]:
        pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(self._h[i])]
        if self._mps_list:
            # Under MPS the list above names the MPS server; this one its clients, whose
            # jobs hold the GPU (jobs.py leaves the server out).
            try:
                mps = pynvml.nvmlDeviceGetMPSComputeRunningProcesses(self._h[i])
                pids += [p.pid for p in mps if p.pid not in pids]
            except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported,
                    AttributeError):  # an older driver or older bindings: not asked again
                self._mps_list = False
            except pynvml.NVMLError:
                pass  # this GPU, this tick: the plain list still names its processes
        return pids

    def mig_instances(self, i: int) -> list[MigInstance]:
        h = self._h[i]
        out = []
        for k in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
            except pynvml.NVMLError_NotFound:
                continue  # a free slot
            gi = pynvml.nvmlDeviceGetGpuInstanceId(mig)
            ci = pynvml.nvmlDeviceGetComputeInstanceId(mig)
            mem = pynvml.nvmlDeviceGetMemoryInfo(mig)
            out.append(MigInstance(gi, ci, self._profile_or_unknown(h, gi),
                                   _text(pynvml.nvmlDeviceGetUUID(mig)),
                                   mem.total, mem.free, mem.used))
        return out

    def _profile_or_unknown(self, h: Any, gpu_instance: int) -> str:
        """The instance's profile name; ``UNKNOWN_PROFILE`` where NVML refuses the lookup
        (nvmlDeviceGetGpuInstanceById: "Requires privileged user"), said once: its memory,
        which the MIG device's own handle gives without privilege, is still reported."""
        try:
            return self._profile(h, gpu_instance)
        except (pynvml.NVMLError_Uninitialized, pynvml.NVMLError_GpuIsLost):
            raise
        except pynvml.NVMLError as exc:
            if not self._said_profile:
                self._said_profile = True
                log.warning("MIG profile names unavailable (NVML answers %s to "
                            "nvmlDeviceGetGpuInstanceById, which requires root): MIG instances' "
                            "memory is reported with GPU_I_PROFILE=\"%s\"; run the agent as "
                            "root to name their profiles", type(exc).__name__.removeprefix(
                                "NVMLError_"), UNKNOWN_PROFILE)
            return UNKNOWN_PROFILE

    @staticmethod
    def _profile(h: Any, gpu_instance: int) -> str:
        profile_id = pynvml.nvmlGpuInstanceGetInfo(
            pynvml.nvmlDeviceGetGpuInstanceById(h, gpu_instance)).profileId
        # The v2 profile info names the profile ("MIG 1g.10gb"); match it by id.
        for p in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
            except pynvml.NVMLError:
                continue
            if info.id == profile_id:
                return _text(info.name).removeprefix("MIG ")
        return str(profile_id)

    def grid_license(self, i: int) -> tuple[bool, bool]:
        f = pynvml.nvmlDeviceGetGridLicensableFeatures(self._h[i])
        # nvml.h: featureState is "non-zero if feature is currently licensed".
        licensed = any(f.gridLicensableFeatures[k].featureState
                       for k in range(min(f.licensableFeaturesCount,
                                          len(f.gridLicensableFeatures))))
        return bool(f.isGridLicenseSupported), licensed

    def xid_events_open(self, indices: Sequence[int]) -> list[int]:
        if self._events is None:
            self._events = pynvml.nvmlEventSetCreate()
        ok = []
        for i in indices:
            try:
                pynvml.nvmlDeviceRegisterEvents(self._h[i], EVENT_XID_CRITICAL, self._events)
                ok.append(i)
            except pynvml.NVMLError:  # NotSupported, a lost GPU, ...: this GPU only
                continue
        return ok

    def xid_events_drain(self, limit: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        if self._events is None:
            return out
        while len(out) < limit:
            try:
                data = pynvml.nvmlEventSetWait(self._events, 0)
            except pynvml.NVMLError_Timeout:
                break  # nothing pending: the normal end of a drain
            if data.eventType & EVENT_XID_CRITICAL:
                index = self._by_address.get(ctypes.cast(data.device, ctypes.c_void_p).value, -1)
                out.append((index, int(data.eventData)))
        return out
