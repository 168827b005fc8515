"""Profiling ratios through DCGM, for GPUs that NVML cannot profile (no GPM: before Hopper).

NVML gives SM activity, SM occupancy, tensor and DRAM activity only through GPM
(Hopper and newer). dcgm-exporter reads them on older GPUs (A100, L4, L40S)
through DCGM's profiling module, which samples the hardware performance
counters. Where DCGM's Python bindings (``pydcgm``, shipped with the
datacenter-gpu-manager package, not on PyPI) and its host engine are present,
``open_dcgm_profiling`` reads the same fields through them; elsewhere it
returns None and those four families are absent from ``/metrics`` (the
``fleetwatch_gpu_profiling_info`` metric says so per GPU).

``ProfilingSource`` is the narrow edge: the real one over pydcgm, ``FakeDcgm``
in tests.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

log = logging.getLogger(__name__)

# dcgm_fields.h: DCGM_FI_PROF_* field ids, each a ratio 0.0 - 1.0.
PROF_FIELDS: Mapping[int, str] = {
    1001: "gpu_gr_engine_active_ratio",   # DCGM_FI_PROF_GR_ENGINE_ACTIVE
    1002: "gpu_sm_active_ratio",          # DCGM_FI_PROF_SM_ACTIVE
    1003: "gpu_sm_occupancy_ratio",       # DCGM_FI_PROF_SM_OCCUPANCY
    1004: "gpu_tensor_active_ratio",      # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
    1005: "gpu_dram_active_ratio",        # DCGM_FI_PROF_DRAM_ACTIVE
}
PROFILED = ("gpu_sm_active_ratio", "gpu_sm_occupancy_ratio", "gpu_tensor_active_ratio",
            "gpu_dram_active_ratio")


class ProfilingSource(Protocol):
    def read(self) -> dict[str, dict[str, float]]:
        """GPU UUID -> catalogue name -> ratio, for the GPUs this source can profile."""

    def close(self) -> None: ...


def clean(values: Mapping[int, float]) -> dict[str, float]:
    """DCGM field id -> value into our names; blanks (DCGM's huge sentinels) and
    out-of-range values left out."""
    out = {}
    for fid, v in values.items():
        name = PROF_FIELDS.get(fid)
        if name is not None and v is not None and 0.0 <= v <= 1.0:
            out[name] = float(v)
    return out


class FakeDcgm:
    """A ``ProfilingSource`` with fixed answers by UUID (tests)."""

    def __init__(self, answers: Mapping[str, Mapping[int, float]]) -> None:
        self.answers = answers
        self.closed = False

    def read(self) -> dict[str, dict[str, float]]:
        return {uuid: clean(v) for uuid, v in self.answers.items()}

    def close(self) -> None:
        self.closed = True


class DcgmProfiling:
    """The real one: watches the DCGM_FI_PROF_* fields of every GPU through the host engine."""

    def __init__(self, interval_s: float) -> None:
        import dcgm_structs  # noqa: F401  (the bindings' own modules)
        import pydcgm

        self._handle: Any = pydcgm.DcgmHandle(ipAddress="127.0.0.1")
        system = self._handle.GetSystem()
        self._group = system.GetDefaultGroup()
        self._fields = pydcgm.DcgmFieldGroup(self._handle, name="fleetwatch-prof",
                                             fieldIds=list(PROF_FIELDS))
        # DCGM samples at this period and keeps one sample: we read the latest each tick.
        self._group.samples.WatchFields(self._fields, int(interval_s * 1e6), 3600.0, 2)
        self._uuids = {gpu: system.discovery.GetGpuAttributes(gpu).identifiers.uuid
                       for gpu in self._group.GetGpuIds()}

    def read(self) -> dict[str, dict[str, float]]:
        latest = self._group.samples.GetLatest(self._fields).values
        out: dict[str, dict[str, float]] = {}
        for gpu, uuid in self._uuids.items():
            per_field = latest.get(gpu, {})
            values = {fid: per_field[fid][-1].value for fid in PROF_FIELDS
                      if fid in per_field and len(per_field[fid])}
            got = clean(values)
            if got:
                out[uuid] = got
        return out

    def close(self) -> None:
        try:
            self._fields.Delete()
        finally:
            self._handle.Shutdown()


def open_dcgm_profiling(interval_s: float) -> ProfilingSource | None:
    """DCGM's profiling fields, or None (one log line) where DCGM is not installed or running."""
    try:
        return DcgmProfiling(interval_s)
    except ImportError:
        # Only GPUs before Hopper need DCGM: the node source says so if it finds one.
        log.debug("DCGM Python bindings not installed")
    except Exception as exc:  # the bindings raise their own error types
        log.warning("DCGM is installed but cannot be used (%s); is nv-hostengine running? "
                    "Profiling ratios come from NVML GPM only", exc)
    return None
