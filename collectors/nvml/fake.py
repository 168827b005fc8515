"""FakeNvml: the ``NvmlBackend`` interface with per-GPU answers, any of which may be an error.

It backs the tests and ``fleetwatch agent --fake-gpus N``. Every answer is
plain data looked up by method name (and argument, for the calls that take
one), so a test replaces one answer with ``pynvml.NVMLError_NotSupported()``
or loses a whole GPU mid-run. Answers are precomputed: a call costs a dict
lookup, so benchmarks measure the agent rather than the fake.

    nv = FakeNvml.of(8)                        # eight healthy H100s
    nv.fail(3, "fan_speed_pct", pynvml.NVMLError_NotSupported())
    nv.lose(5)                                 # every later call on GPU 5: GpuIsLost
    nv.fail_all(6, pynvml.NVMLError_Unknown()) # GPU 6 answers no call (its GSP hangs)
    nv.inject_xid(2, 79)                       # one XID event, drained next tick
    FakeNvml.missing()                         # nvmlInit: library not found

``fleetwatch agent --fake-gpus N --fake-faults FILE`` steers the fake from a JSON file
(``fault_file.FaultFile``), so that an on-call can make a GPU hot, lose it, raise an XID
or set and climb its ECC, row remap, retired page, PCIe and NVLink error counters
through the real agent, Kafka and processor.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from fleetwatch.collectors.nvml import backend as b
from fleetwatch.collectors.nvml.fault_file import FaultFile

log = logging.getLogger(__name__)

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


class FakeNvml:
    """``NvmlBackend`` over a list of ``FakeGpu``; ``init_error`` fails nvmlInit."""

    def __init__(self, gpus: Sequence[FakeGpu], driver: str = "580.105.08",
                 init_error: Exception | None = None) -> None:
        self.gpus = list(gpus)
        self.driver = driver
        self.init_error = init_error
        self.initialized = False
        self.inits = self.shutdowns = 0
        # The driver unloaded under a running agent: every call answers Uninitialized.
        self.driver_gone = False
        self.calls = 0
        self._events: deque[tuple[int, int]] = deque()
        self._registered: set[int] = set()
        self._gpm_started: set[int] = set()
        self._t0 = time.monotonic()
        # nvmlEventSetCreate fails (some VMs): no NVML XID events at all.
        self.event_set_error: Exception | None = None
        self.faults: FaultFile | None = None  # read at every tick (xid_events_drain)

    # -- scenarios ---------------------------------------------------------
    @classmethod
    def of(cls, n: int, model: str = "h100", faults: str | None = None,
           clock: Callable[[], float] = time.monotonic) -> FakeNvml:
        """``n`` GPUs; ``faults``: a ``FaultFile`` path (raises ``FaultFileError``), its
        ``per_min`` counters climbing on ``clock``."""
        make = {"h100": h100, "l4": l4}[model]
        nv = cls([make(i) for i in range(n)])
        if faults is not None:
            nv.faults = FaultFile(faults, nv, clock)
        return nv

    @classmethod
    def missing(cls) -> FakeNvml:
        """No NVIDIA driver on the machine: libnvidia-ml.so.1 cannot be loaded."""
        return cls([], init_error=pynvml.NVMLError_LibraryNotFound())

    @classmethod
    def mismatch(cls) -> FakeNvml:
        """Driver upgraded without a reboot: library and kernel module disagree."""
        return cls([], init_error=pynvml.NVMLError_LibRmVersionMismatch())

    def fail(self, i: int, method: str, error: Exception) -> None:
        """Make one call on one GPU raise ``error`` from now on."""
        self.gpus[i].answers[method] = error

    def set(self, i: int, method: str, value: Any) -> None:
        self.gpus[i].answers[method] = value

    def lose(self, i: int) -> None:
        """The GPU falls off the bus: every call on it raises GpuIsLost."""
        self.gpus[i].lost = True

    def fail_all(self, i: int, error: Exception | None) -> None:
        """Every call on GPU ``i`` raises ``error`` (None: they answer again)."""
        self.gpus[i].error = error

    def restore(self, i: int) -> None:
        """The GPU is back (after a reset): calls on it answer again."""
        self.gpus[i].lost = False
        self.gpus[i].open_error = None
        self.gpus[i].error = None

    def unload_driver(self) -> None:
        self.driver_gone = True

    def load_driver(self) -> None:
        self.driver_gone = False

    def inject_xid(self, i: int, xid: int) -> None:
        if i in self._registered:
            self._events.append((i, xid))

    # -- NvmlBackend -------------------------------------------------------
    def _gpu(self, i: int) -> FakeGpu:
        self.calls += 1
        if self.driver_gone or not self.initialized:
            raise pynvml.NVMLError_Uninitialized()
        gpu = self.gpus[i]
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if gpu.error is not None:
            raise gpu.error
        return gpu

    def _answer(self, i: int, method: str, arg: int | None = None) -> Any:
        gpu = self._gpu(i)
        if method in gpu.delays:
            time.sleep(gpu.delays[method])
        a = gpu.answers[method]
        if isinstance(a, dict):
            a = a[arg]
        if isinstance(a, BaseException):
            raise a
        return a

    def init(self) -> None:
        self.calls += 1
        if self.driver_gone:
            raise pynvml.NVMLError_DriverNotLoaded()
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True
        self.inits += 1

    def shutdown(self) -> None:
        # NVML counts: shutdown after a failed init is harmless but is not a pair.
        if self.initialized:
            self.shutdowns += 1
        self.initialized = self.inits > self.shutdowns
        if not self.initialized:
            self._registered.clear()
            self._gpm_started.clear()

    def _live(self) -> None:
        self.calls += 1
        if self.driver_gone or not self.initialized:
            raise pynvml.NVMLError_Uninitialized()

    def driver_version(self) -> str:
        self._live()
        return self.driver

    def device_count(self) -> int:
        self._live()
        return len(self.gpus)

    def open(self, i: int) -> None:
        self._live()
        if i >= len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self.gpus[i]
        if gpu.open_error is not None:
            raise gpu.open_error
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        self._gpm_started.discard(i)

    def uuid(self, i: int) -> str:
        return self._gpu(i).uuid

    def name(self, i: int) -> str:
        return self._gpu(i).name

    def serial(self, i: int) -> str:
        return self._gpu(i).serial

    def pci_bus_id(self, i: int) -> str:
        return self._gpu(i).pci_bus_id

    def mig_mode(self, i: int) -> int:
        return int(self._answer(i, "mig_mode"))

    def utilization(self, i: int) -> tuple[int, int]:
        return self._answer(i, "utilization")  # type: ignore[no-any-return]

    def memory(self, i: int) -> tuple[int, int, int, int | None]:
        return self._answer(i, "memory")  # type: ignore[no-any-return]

    def power_usage_mw(self, i: int) -> int:
        return int(self._answer(i, "power_usage_mw"))

    def power_limit_mw(self, i: int) -> int:
        return int(self._answer(i, "power_limit_mw"))

    def power_default_limit_mw(self, i: int) -> int:
        return int(self._answer(i, "power_default_limit_mw"))

    def temperature_c(self, i: int) -> int:
        return int(self._answer(i, "temperature_c"))

    def temperature_threshold_c(self, i: int, which: int) -> int:
        return int(self._answer(i, "temperature_threshold_c", which))

    def clock_mhz(self, i: int, which: int) -> int:
        return int(self._answer(i, "clock_mhz", which))

    def clocks_event_reasons(self, i: int) -> int:
        return int(self._answer(i, "clocks_event_reasons"))

    def fan_speed_pct(self, i: int) -> int:
        return int(self._answer(i, "fan_speed_pct"))

    def pcie_throughput_kib_s(self, i: int, counter: int) -> int:
        return int(self._answer(i, "pcie_throughput_kib_s", counter))

    def encoder_util_pct(self, i: int) -> int:
        return int(self._answer(i, "encoder_util_pct"))

    def decoder_util_pct(self, i: int) -> int:
        return int(self._answer(i, "decoder_util_pct"))

    def nvlink_active(self, i: int, link: int) -> bool:
        gpu = self._gpu(i)
        if link >= gpu.nvlinks:
            raise pynvml.NVMLError_NotSupported()
        state = gpu.answers.get("nvlink_active", {})
        a = state.get(link, True) if isinstance(state, dict) else state
        if isinstance(a, BaseException):
            raise a
        return bool(a)

    def field_values(self, i: int, fields: Sequence[tuple[int, int]]) -> list[b.FieldResult]:
        gpu = self._gpu(i)
        if "field_values" in gpu.answers:
            self._answer(i, "field_values")  # a whole-call error
        out: list[b.FieldResult] = []
        for fid, _scope in fields:
            v = gpu.fields.get(fid, FieldError())
            if fid == b.FI_NVLINK_LINK_COUNT:
                v = gpu.nvlinks if gpu.nvlinks else FieldError()
            elif fid == b.FI_TOTAL_ENERGY_MJ and not isinstance(v, FieldError):
                # The energy counter advances at the answered power (mW x s = mJ), so
                # --fake-gpus gives the processor's energy integration something to do.
                power = gpu.answers.get("power_usage_mw")
                if isinstance(power, int):
                    v += power * (time.monotonic() - self._t0)
            elif fid in gpu.field_rates and not isinstance(v, FieldError):
                v += gpu.field_rates[fid] * (time.monotonic() - self._t0)
            out.append((v.code, 0.0) if isinstance(v, FieldError) else (0, float(v)))
        return out

    def gpm_supported(self, i: int) -> bool:
        return self._gpu(i).gpm is not None

    def gpm_metrics(self, i: int, metric_ids: Sequence[int]) -> list[b.FieldResult]:
        gpu = self._gpu(i)
        if gpu.gpm is None:
            raise pynvml.NVMLError_NotSupported()
        refused = gpu.answers.get("gpm_metrics")  # fail(i, "gpm_metrics", ...): sampling fails
        if isinstance(refused, BaseException):
            raise refused
        if i not in self._gpm_started:  # GPM needs two samples, as on a real GPU
            self._gpm_started.add(i)
            return []
        return [(0, gpu.gpm[m]) if m in gpu.gpm else (NOT_SUPPORTED, 0.0) for m in metric_ids]

    def compute_pids(self, i: int) -> list[int]:
        gpu = self._gpu(i)
        return gpu.pids + [p for p in gpu.mps_pids if p not in gpu.pids]

    def grid_license(self, i: int) -> tuple[bool, bool]:
        return self._answer(i, "grid_license")  # type: ignore[no-any-return]

    def mig_instances(self, i: int) -> list[b.MigInstance]:
        gpu = self._gpu(i)
        if self._answer(i, "mig_mode") != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError_NotSupported()
        return list(gpu.answers.get("mig_instances", []))

    def enable_mig(self, i: int, profiles: Sequence[tuple[int, str, int]]) -> None:
        """MIG on, with (GPU instance id, profile, memory bytes) instances; util unsupported."""
        self.set(i, "mig_mode", pynvml.NVML_DEVICE_MIG_ENABLE)
        self.set(i, "mig_instances", [
            b.MigInstance(gi, 0, profile, f"MIG-{self.gpus[i].uuid[4:-4]}{gi:04x}", mem,
                          mem - 1_000_000_000 * (k + 1), 1_000_000_000 * (k + 1))
            for k, (gi, profile, mem) in enumerate(profiles)])
        # NVML on a MIG-enabled GPU: utilization is per instance, not for the whole GPU.
        self.fail(i, "utilization", pynvml.NVMLError_NotSupported())

    def xid_events_open(self, indices: Sequence[int]) -> list[int]:
        self._live()
        if isinstance(self.event_set_error, BaseException):
            raise self.event_set_error
        ok = []
        for i in indices:
            try:
                if self._answer(i, "register_events") is True:
                    ok.append(i)
            except pynvml.NVMLError:  # as the real backend: this GPU only
                continue
        self._registered.update(ok)
        return ok

    def xid_events_drain(self, limit: int) -> list[tuple[int, int]]:
        self._live()
        if self.faults is not None:  # the reader's first call of a tick
            self.faults.apply()
        out = []
        while self._events and len(out) < limit:
            out.append(self._events.popleft())
        return out
