"""The real NVML behind the ``NvmlBackend`` interface, through NVIDIA's nvidia-ml-py bindings.

``backend.py`` says which calls fleetwatch makes (the Protocol, field ids, MIG instance);
this module makes them on a real driver: it keeps the handles, reads NVML's value unions,
copes with the names older drivers lack and drains the XID event set. It raises pynvml's
own ``NVMLError_*`` classes, as ``FakeNvml`` does, for ``reader.classify`` to sort.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import Any

import pynvml

from fleetwatch.collectors.nvml.backend import (
    EVENT_XID_CRITICAL,
    NVML_SUCCESS,
    UNKNOWN_PROFILE,
    FieldResult,
    MigInstance,
)

log = logging.getLogger("fleetwatch.collectors.nvml.reader")


# c_nvmlValue_t is a union: the member to read depends on valueType (unsigned long long
# for any other type).
_UNION_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def _field_value(fv: Any) -> float:
    return float(getattr(fv.value, _UNION_MEMBER.get(fv.valueType, "ullVal")))


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
