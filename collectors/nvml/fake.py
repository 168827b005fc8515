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

The GPUs it serves (``FakeGpu``, the ``h100`` and ``l4`` boards) are in ``fake_gpus``;
this module is the NVML behaviour around them: init and shutdown, lost and failing GPUs,
counters that advance with time, XID events.

``fleetwatch agent --fake-gpus N --fake-faults FILE`` steers the fake from a JSON file
(``fault_file.FaultFile``), so that an on-call can make a GPU hot, lose it, raise an XID
or set and climb its ECC, row remap, retired page, PCIe and NVLink error counters
through the real agent, Kafka and processor.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from fleetwatch.collectors.nvml import backend as b
from fleetwatch.collectors.nvml.fake_gpus import NOT_SUPPORTED, FakeGpu, FieldError, h100, l4
from fleetwatch.collectors.nvml.fault_file import FaultFile


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
