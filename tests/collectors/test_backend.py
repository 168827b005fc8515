"""The real pynvml backend without a GPU: pynvml's functions stand in for the driver's answers."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from fleetwatch.collectors.nvml import NvmlReader, NvmlUnavailable, PynvmlBackend
from fleetwatch.collectors.nvml import backend as b


def test_no_driver_here_is_a_clear_unavailable() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:  # pragma: no cover - a machine with a driver
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(NvmlUnavailable) as info:
        NvmlReader.open(PynvmlBackend())
    assert "libnvidia-ml.so.1 not found" in str(info.value)


def field(value_type: int, member: str, value: float, ret: int = 0) -> pynvml.c_nvmlFieldValue_t:
    fv = pynvml.c_nvmlFieldValue_t()
    fv.valueType = value_type
    fv.nvmlReturn = ret
    setattr(fv.value, member, value)
    return fv


def test_field_values_read_the_union_member_named_by_value_type(monkeypatch) -> None:
    answers = [
        field(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**40 + 3),
        field(pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 0.25),
        field(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 70),
        field(pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -5),
        field(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 0, ret=pynvml.NVML_ERROR_NOT_SUPPORTED),
    ]
    asked: list[object] = []

    def get(handle: object, ids: list[tuple[int, int]]) -> list[pynvml.c_nvmlFieldValue_t]:
        asked.extend(ids)
        return answers

    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", get)
    be = PynvmlBackend()
    be._h = [object()]
    ids = [(b.FI_NVLINK_THROUGHPUT_DATA_TX_KIB, b.SCOPE_ALL_LINKS), (1, 0), (2, 0), (3, 0), (4, 0)]
    assert be.field_values(0, ids) == [(0, 2**40 + 3), (0, 0.25), (0, 70.0), (0, -5.0),
                                       (pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0)]
    assert asked[0] == (138, 0xFFFFFFFF)  # NVLink throughput summed over all links


def test_xid_drain_maps_handles_and_stops_at_timeout(monkeypatch) -> None:
    handles = [ctypes.cast(ctypes.c_void_p(0x1000 + 16 * i), pynvml.c_nvmlDevice_t)
               for i in range(3)]
    events = []
    for index, xid, kind in ((2, 79, b.EVENT_XID_CRITICAL), (0, 13, b.EVENT_XID_CRITICAL),
                             (1, 0, 0x10)):  # a clock event: not an XID
        e = pynvml.c_nvmlEventData_t()
        e.device, e.eventType, e.eventData = handles[index], kind, xid
        events.append(e)

    def wait(event_set: object, timeout_ms: int) -> pynvml.c_nvmlEventData_t:
        assert timeout_ms == 0  # never block the tick
        if not events:
            raise pynvml.NVMLError_Timeout()
        return events.pop(0)

    monkeypatch.setattr(pynvml, "nvmlEventSetWait", wait)
    be = PynvmlBackend()
    be._h = handles
    be._by_address = {ctypes.cast(h, ctypes.c_void_p).value: i for i, h in enumerate(handles)}
    be._events = object()
    assert be.xid_events_drain(100) == [(2, 79), (0, 13)]
    assert be.xid_events_drain(100) == []


def test_open_attaches_each_gpu_alone_and_xid_registration_is_per_gpu(monkeypatch) -> None:
    handles = {i: ctypes.cast(ctypes.c_void_p(0x2000 + 16 * i), pynvml.c_nvmlDevice_t)
               for i in range(3)}

    def by_index(i: int) -> object:
        if i == 1:
            raise pynvml.NVMLError_GpuIsLost()
        return handles[i]

    registered: list[int] = []

    def register(handle: object, kinds: int, event_set: object) -> None:
        if handle is handles[2]:
            raise pynvml.NVMLError_Unknown()  # not only NotSupported: still this GPU alone
        registered.append(kinds)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", by_index)
    monkeypatch.setattr(pynvml, "nvmlEventSetCreate", lambda: object())
    monkeypatch.setattr(pynvml, "nvmlDeviceRegisterEvents", register)
    be = PynvmlBackend()
    be.open(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        be.open(1)
    be.open(2)
    assert be.xid_events_open([0, 2]) == [0]
    assert registered == [b.EVENT_XID_CRITICAL]


def test_grid_license_reads_the_feature_states(monkeypatch) -> None:
    def features(handle: object) -> pynvml.c_nvmlGridLicensableFeatures_v4_t:
        f = pynvml.c_nvmlGridLicensableFeatures_v4_t()
        f.isGridLicenseSupported = 1
        f.licensableFeaturesCount = 2
        f.gridLicensableFeatures[1].featureState = 1  # nvml.h: non-zero = licensed
        return f

    monkeypatch.setattr(pynvml, "nvmlDeviceGetGridLicensableFeatures", features)
    be = PynvmlBackend()
    be._h = {0: object()}
    assert be.grid_license(0) == (True, True)


def test_mig_instances_name_their_profile_as_dcgm_exporter_does(monkeypatch) -> None:
    class Mem:
        total, free, used = 10 * 2**30, 9 * 2**30, 2**30

    class GiInfo:
        profileId = 19

    def profile(handle: object, p: int) -> pynvml.c_nvmlGpuInstanceProfileInfo_v2_t:
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id = 19 if p == 0 else 100 + p
        info.name = b"MIG 1g.10gb" if p == 0 else b"MIG other"
        return info

    def by_index(h: object, k: int) -> object:
        if k != 1:
            raise pynvml.NVMLError_NotFound()  # free slots
        return "mig-handle"

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", lambda h: 3)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigDeviceHandleByIndex", by_index)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceId", lambda h: 7)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeInstanceId", lambda h: 0)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: Mem())
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: "MIG-abc")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceById", lambda h, gi: "gi")
    monkeypatch.setattr(pynvml, "nvmlGpuInstanceGetInfo", lambda gi: GiInfo())
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceProfileInfo", profile)
    be = PynvmlBackend()
    be._h = {0: object()}
    [inst] = be.mig_instances(0)
    assert (inst.gpu_instance, inst.profile, inst.uuid, inst.fb_used) == (7, "1g.10gb",
                                                                         "MIG-abc", 2**30)


def test_compute_pids_add_the_mps_clients_where_the_driver_lists_them(monkeypatch) -> None:
    def procs(*pids: int) -> list[object]:
        return [type("P", (), {"pid": p})() for p in pids]

    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", lambda h: procs(10))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMPSComputeRunningProcesses",
                        lambda h: procs(11, 12))
    be = PynvmlBackend()
    be._h = [object()]
    assert be.compute_pids(0) == [10, 11, 12]

    def missing(h: object) -> list[object]:
        raise pynvml.NVMLError_FunctionNotFound()

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMPSComputeRunningProcesses", missing)
    be = PynvmlBackend()
    be._h = [object()]
    assert be.compute_pids(0) == [10]  # an older driver: the plain list alone
    assert be._mps_list is False
