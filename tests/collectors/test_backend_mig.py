"""The real pynvml backend's GPM samples and MIG instances, pynvml's functions standing in
for the driver's answers (no GPU here)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pynvml
import pytest

from fleetwatch.collectors.nvml import PynvmlBackend


def test_gpm_samples_are_kept_only_once_the_first_one_was_taken(monkeypatch) -> None:
    freed: list[object] = []
    refuse = [True]

    def sample_get(handle: object, sample: object) -> None:
        if refuse[0]:
            raise pynvml.NVMLError_NotSupported()

    monkeypatch.setattr(pynvml, "nvmlGpmSampleAlloc", object)
    monkeypatch.setattr(pynvml, "nvmlGpmSampleFree", freed.append)
    monkeypatch.setattr(pynvml, "nvmlGpmSampleGet", sample_get)
    be = PynvmlBackend()
    be._h = {0: object()}
    with pytest.raises(pynvml.NVMLError_NotSupported):
        be.gpm_metrics(0, [2])
    assert be._gpm == {} and len(freed) == 2  # nothing half-made kept for the next call
    refuse[0] = False  # e.g. MIG turned off: the next call is a first sample again
    assert be.gpm_metrics(0, [2]) == []
    assert len(be._gpm[0]) == 2


def mig_driver(monkeypatch, refuse: Exception | None) -> None:
    mem = {1: (40 * 2**30, 30 * 2**30), 2: (10 * 2**30, 9 * 2**30)}

    def instance_by_id(h: object, gi: int) -> object:
        if refuse is not None:
            raise refuse
        return gi

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", lambda h: 3)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigDeviceHandleByIndex",
                        lambda h, k: k + 1 if k < 2 else (_ for _ in ()).throw(
                            pynvml.NVMLError_NotFound()))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceId", lambda mig: mig)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeInstanceId", lambda mig: 0)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda mig: SimpleNamespace(
        total=mem[mig][0], free=mem[mig][1], used=mem[mig][0] - mem[mig][1]))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda mig: f"MIG-{mig}")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceById", instance_by_id)
    monkeypatch.setattr(pynvml, "nvmlGpuInstanceGetInfo",
                        lambda gi: SimpleNamespace(profileId={1: 9, 2: 19}[gi]))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceProfileInfo", lambda h, p: (
        SimpleNamespace(id={0: 19, 1: 9}.get(p, 99),
                        name={0: "MIG 1g.10gb", 1: "MIG 3g.40gb"}.get(p, "MIG x"))))


def test_mig_profiles_are_named_from_the_profile_info(monkeypatch) -> None:
    mig_driver(monkeypatch, None)
    be = PynvmlBackend()
    be._h = {0: object()}
    got = be.mig_instances(0)
    assert [(m.gpu_instance, m.profile, m.fb_total) for m in got] == [
        (1, "3g.40gb", 40 * 2**30), (2, "1g.10gb", 10 * 2**30)]


def test_a_refused_profile_lookup_keeps_the_instances_memory_under_a_generic_profile(
        monkeypatch, caplog: pytest.LogCaptureFixture) -> None:
    mig_driver(monkeypatch, pynvml.NVMLError_NoPermission())
    be = PynvmlBackend()
    be._h = {0: object()}
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            got = be.mig_instances(0)
    assert [(m.gpu_instance, m.profile, m.fb_used) for m in got] == [
        (1, "unknown", 10 * 2**30), (2, "unknown", 2**30)]
    said = [r.getMessage() for r in caplog.records if "MIG" in r.getMessage()]
    assert len(said) == 1
    assert "NoPermission" in said[0] and "root" in said[0] and 'GPU_I_PROFILE="unknown"' in said[0]


def test_a_lost_gpu_in_the_profile_lookup_is_still_lost(monkeypatch) -> None:
    mig_driver(monkeypatch, pynvml.NVMLError_GpuIsLost())
    be = PynvmlBackend()
    be._h = {0: object()}
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        be.mig_instances(0)
