"""Read every GPU through an ``NvmlBackend`` into ``GpuReading``s keyed by catalogue name.

This module: the lifecycle (init, lost, close) and the tick; how each GPU is attached
and looked at again is in ``collectors.nvml.attach``, what a tick reads of each GPU in
``collectors.nvml.metrics``.

Failure is data. Every NVML failure is classified in one place, ``NvmlReader._failed``
(reached through the ``_q`` wrapper, or from the per-tick probe loop that inlines it):

* ``NVMLError_NotSupported`` (or ``NoPermission``, or ``FunctionNotFound`` from an older
  driver): the metric is absent, never 0, and the call is not made again on that GPU
  until its MIG mode changes (what a GPU supports changes with MIG);
* ``NVMLError_GpuIsLost``: that GPU becomes state "lost" and the others keep flowing;
* ``NVMLError_Uninitialized``: the driver went away; ``read`` raises ``NvmlDriverGone``
  and the caller closes this reader and opens a new one later;
* anything else: the metric is absent this tick and ``on_error(kind)`` counts it; the
  log says so once per GPU and call when it starts, and with its count when it answers. A
  GPU that answers no call at all (every one Unknown, Timeout: a GSP that no longer
  answers RPCs) for more than ``LOST_AFTER_INTERVALS`` ticks in a row while another
  GPU of the node answers is reported lost, as replay reads a GPU whose samples stop
  for that many of its intervals (``fleetwatch.recorded_ticks``). Its calls are then
  no longer made every tick (each may block for seconds); the re-probe tries it, and
  it is ok again once a tick's reads give a value.

Slow calls: a call that takes longer than ``call_budget_s`` (0.5 s; NVML answers in
milliseconds) is left out on that GPU, said once naming the GPU and the call, and asked
again every ``slow_every`` ticks until it answers in time (said once too). With
``budget_s`` (the agent: half its interval) each GPU is read in its own worker and the
tick waits at most that long: a GPU not done by then reports no values that tick (never
values read after its frame's time), and one whose reads have not returned for
``HUNG_S`` (30 s) is lost; the other GPUs keep their cadence.

Lifecycle: nvmlInit_v2 touches no GPU; each GPU is then opened on its own
(nvmlDeviceGetHandleByIndex), so one bad GPU is reported lost and the others
report. Every ``slow_every`` ticks the reader looks again: GPUs that appeared are
opened, lost ones probed (after a reset they answer). An XID 79 marks a GPU lost
at once. An NVML XID event that names no GPU of the node is counted
(``on_dropped("xid_unknown_gpu")``), not attributed. ``close`` calls nvmlShutdown
once for the nvmlInit that ``open`` made.

What is batched: ECC, retired pages, row remapping, NVLink errors and throughput,
memory temperature, energy, the PCIe replay counter and (driver R550+) the PCIe
byte counters come from one ``nvmlDeviceGetFieldValues`` call per GPU. PCIe rates
come from those counters where the driver has them, else from
``nvmlDeviceGetPcieThroughput``, which blocks ~20 ms per direction. Thresholds,
the power limit, MIG mode, the vGPU licence and NVLink link state (one call per
link; a failed call makes the count unknown, not 0) are re-read every ``slow_every``
ticks. Under MIG each instance's memory is read every tick (``NvmlRead.mig``).

SM activity, occupancy, tensor and DRAM activity come from GPM (GPU Performance
Monitoring: Hopper and newer). Older GPUs have no GPM: those four ratios are
absent (never 0), ``gpu_util_pct`` (nvmlDeviceGetUtilizationRates, the share of
time any kernel ran) is what they offer, and ``gpu_gr_engine_active_ratio`` falls
back to it divided by 100, as DCGM's own NVML fallback does (DCGM fills the
four in where installed: ``collectors/dcgm.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pynvml

from fleetwatch.collectors.nvml.attach import GpuAttach
from fleetwatch.collectors.nvml.backend import MigInstance, NvmlBackend
from fleetwatch.collectors.nvml.calls import CallWatch
from fleetwatch.collectors.nvml.metrics import GpuMetrics
from fleetwatch.collectors.nvml.pool import GpuPool
from fleetwatch.collectors.nvml.state import (
    _ABSENT,
    _CARRIED,
    _INIT_HINTS,
    MAX_XIDS_PER_TICK,
    XID_FALLEN_OFF_BUS,
    NvmlDriverGone,
    NvmlRead,
    NvmlUnavailable,
    StateCallback,
    T,
    _DriverGone,
    _Gpu,
    _GpuLost,
    error_kind,
    log_gpu_state,
)
from fleetwatch.frame import GpuReading

log = logging.getLogger(__name__)

__all__ = ["LOST_AFTER_INTERVALS", "MAX_XIDS_PER_TICK", "XID_FALLEN_OFF_BUS", "NvmlDriverGone",
           "NvmlRead", "NvmlReader", "NvmlUnavailable", "error_kind", "log_gpu_state"]

# A GPU that answers nothing for more than this many of its intervals while another GPU
# of its node answers is lost: the agent counts its ticks, replay (recorded_ticks) the
# gaps in its samples. One or two bad ticks are a hiccup, not a lost GPU.
LOST_AFTER_INTERVALS = 3
HUNG_S = 30.0  # a GPU whose reads have not returned for this long is lost (with a pool)
UNKNOWN_GPU = "xid_unknown_gpu"  # on_dropped's reason for an XID event of no known GPU
# One GPU's reads of a tick: its metrics, the pids of its compute processes, its MIG devices.
_GpuRead = tuple[dict[str, float], "list[int] | None", "list[MigInstance] | None"]
_NOTHING: _GpuRead = ({}, None, None)


class NvmlReader(GpuAttach, GpuMetrics, CallWatch):
    """Attaches each GPU on its own, then ``read()`` gives one reading per GPU per tick.

    Every ``slow_every`` ticks it also looks again: a GPU that appeared (the count
    grew) is attached, and a lost one is probed again (after a reset it answers).
    Each change of a GPU's state goes to ``on_state(index, uuid, state, why)``.
    """

    def __init__(self, backend: NvmlBackend, on_error: Callable[[str], None] | None = None,
                 slow_every: int = 12, clock: Callable[[], float] = time.monotonic,
                 on_state: StateCallback | None = None,
                 on_dropped: Callable[[str], None] | None = None,
                 budget_s: float | None = None, kernel_log: bool = True) -> None:
        self.backend = backend
        # Whether the agent reads the kernel log: where NVML gives no XID events, the only
        # other place XIDs are seen (the log line says which holds).
        self.kernel_log = kernel_log
        # budget_s: read each GPU in its own worker, waiting at most this long (pool.py).
        self._pool: GpuPool[Any] | None = GpuPool(budget_s) if budget_s else None
        self._said_late: set[int] = set()
        CallWatch.__init__(self)
        self.clock = clock
        self.on_error = on_error or (lambda kind: None)
        self.on_state = on_state or log_gpu_state
        self.on_dropped = on_dropped or (lambda reason: None)
        self._said_unknown_gpu = False
        # GPU index -> the kind of the last NVML error it answered this tick
        self._failing: dict[int, str] = {}
        self._mute: dict[int, int] = {}  # GPU index -> ticks in a row it answered nothing
        self._muted: set[int] = set()    # lost for answering nothing (not GpuIsLost)
        self.slow_every = max(1, slow_every)
        self.driver = ""
        self._gpus: list[_Gpu] = []
        self._tick = 0
        self._events = True  # until the event set cannot be made
        self._open = False

    @classmethod
    def open(cls, backend: NvmlBackend, on_error: Callable[[str], None] | None = None,
             slow_every: int = 12, clock: Callable[[], float] = time.monotonic,
             on_state: StateCallback | None = None,
             on_dropped: Callable[[str], None] | None = None,
             budget_s: float | None = None, kernel_log: bool = True) -> NvmlReader:
        """Initialize NVML and discover the GPUs; raise ``NvmlUnavailable`` with a hint."""
        try:
            backend.init()
        except pynvml.NVMLError as exc:
            reason, hint = _INIT_HINTS.get(type(exc), (f"nvmlInit failed: {exc}",
                                                       "check that nvidia-smi works on this node"))
            raise NvmlUnavailable(reason, hint) from exc
        reader = cls(backend, on_error, slow_every, clock, on_state, on_dropped, budget_s,
                     kernel_log)
        reader._open = True
        try:
            reader._discover()
        except (pynvml.NVMLError, _DriverGone) as exc:  # init answered, listing failed
            reader.close()
            raise NvmlUnavailable(f"NVML failed while listing the GPUs: {exc!r}",
                                  "check that nvidia-smi lists them on this node") from exc
        return reader

    # -- the one call wrapper ------------------------------------------------
    def _q(self, g: _Gpu, key: str, fn: Callable[..., T], *args: Any) -> T | None:
        if key in g.skip or (g.slowed and g.slowed.get(key, 0) > self._tick):
            return None
        t0 = time.perf_counter()
        try:
            answer = fn(g.index, *args)
        except pynvml.NVMLError as exc:
            self._failed(g, key, exc)
            return None
        else:
            if key in g.failing:
                self._note_answer(g, key)
            return answer
        finally:
            took = time.perf_counter() - t0
            if took > self.call_budget_s or key in g.slowed:
                self._timed(g, key, took)

    def _failed(self, g: _Gpu, key: str, exc: pynvml.NVMLError) -> None:
        if isinstance(exc, pynvml.NVMLError_GpuIsLost):
            self._set_lost(g, "NVML answers GpuIsLost")
            self.on_error(error_kind(exc))
            raise _GpuLost from None
        if isinstance(exc, pynvml.NVMLError_Uninitialized):
            raise _DriverGone from None
        if exc.value in _ABSENT:
            g.skip.add(key)
            return
        self._failing[g.index] = kind = error_kind(exc)
        self.on_error(kind)
        self._note_failure(g, key, kind)

    def _set_lost(self, g: _Gpu, why: str) -> None:
        if not g.lost:
            g.lost = True
            g.slow.clear()
            g.links_down = None
            self.on_state(g.index, g.uuid, "lost", why)

    @property
    def gpu_count(self) -> int:
        return len(self._gpus)

    @property
    def pci_bus_ids(self) -> dict[int, str]:
        return {g.index: g.info["pci_bus_id"] for g in self._gpus if "pci_bus_id" in g.info}

    def mark_lost(self, index: int, why: str) -> None:
        """Another source (the kernel log's XID 79) says this GPU is gone."""
        for g in self._gpus:
            if g.index == index:
                self._set_lost(g, why)

    # -- one tick ------------------------------------------------------------
    def read(self, job_of: Callable[[list[int]], str | None] | None = None) -> NvmlRead:
        """One reading per GPU; ``job_of(pids)`` names the job holding a GPU (jobs.py).

        Raises ``NvmlDriverGone`` when NVML answers Uninitialized.
        """
        try:
            return self._read(job_of)
        except _DriverGone:
            raise NvmlDriverGone("NVML answers Uninitialized: the driver was unloaded or "
                                 "reset") from None

    def _read(self, job_of: Callable[[list[int]], str | None] | None) -> NvmlRead:
        slow = self._tick % self.slow_every == 0
        if slow and self._tick:
            self._reprobe()
        self._tick += 1
        self._failing.clear()
        xids = self._drain_xids()
        readings: list[GpuReading] = []
        pids: dict[int, list[int]] = {}
        mig: dict[int, list[MigInstance]] = {}
        read: list[tuple[_Gpu, dict[str, float], str | None]] = []
        for g in self._gpus:
            if XID_FALLEN_OFF_BUS in xids.get(g.index, ()):
                self._set_lost(g, "XID 79 (fallen off the bus)")
        done = self._read_each([g for g in self._gpus if not g.lost], slow)
        for g in self._gpus:
            metrics, p, instances = done.get(g.index, _NOTHING)
            job = None
            if p:
                pids[g.index] = p
                job = job_of(p) if job_of is not None else None
            if instances:
                mig[g.index] = instances
            read.append((g, metrics, job))
        self._judge_mute(read)
        for g, metrics, job in read:
            x = xids.get(g.index)
            if g.lost:
                readings.append(GpuReading(g.index, g.uuid, g.model, {}, state="lost",
                                           xids=tuple(x) if x else (), info=g.info))
                continue
            # Thresholds, limits and link state are read on the slow cadence and carried
            # between reads; with nothing fresh this tick they would pass for fresh values.
            if metrics.keys() - _CARRIED:
                metrics.update(g.slow)
            else:
                metrics = {}
            readings.append(GpuReading(g.index, g.uuid, g.model, metrics, job,
                                       xids=tuple(x) if x else (), info=g.info))
        return NvmlRead(readings, pids, mig)

    def _read_each(self, gpus: list[_Gpu], slow: bool) -> dict[int, _GpuRead]:
        """Each GPU's reads of this tick: in turn, or with a pool each in its own worker,
        waited for at most the pool's budget (a GPU not done by then has no values)."""
        if self._pool is None:
            return {g.index: self._read_gpu(g, slow) for g in gpus}
        done, late = self._pool.run({g.index: partial(self._read_gpu, g, slow) for g in gpus})
        for i in late:
            g = self._gpus[i]
            # Slow is not lost (its calls come back, and are then left out: _timed); calls
            # that do not come back at all for HUNG_S are.
            hung = self._pool.busy_for(i)
            if hung > HUNG_S:
                self._set_lost(g, f"its NVML calls have not returned for {hung:.0f} s")
                self._muted.add(i)
            if i not in self._said_late:
                self._said_late.add(i)
                log.warning("GPU %d (%s): its NVML calls did not return within %.2f s of the "
                            "tick; reported without values until they do (the other GPUs "
                            "keep their cadence)", i, g.uuid, self._pool.budget_s)
        for i in done:
            # Back in time, and no call of it left out for being slow (re-asking that one
            # makes it late again every slow_every ticks: one episode, said once).
            if i in self._said_late and not self._gpus[i].slowed:
                self._said_late.discard(i)
                log.info("GPU %d (%s): its NVML calls return in time again", i,
                         self._gpus[i].uuid)
        return done

    def _read_gpu(self, g: _Gpu, slow: bool) -> _GpuRead:
        """One GPU's reads of a tick (in a worker of the pool, where there is one)."""
        metrics: dict[str, float] = {}
        try:
            if slow:
                self._read_slow(g)
            self._read_fast(g, metrics)
            pids = self._q(g, "pids", self.backend.compute_pids)
            instances = None
            if g.info.get("mig_mode") == "enabled":
                instances = self._q(g, "mig_instances", self.backend.mig_instances)
        except _GpuLost:
            return _NOTHING
        return metrics, pids, instances

    def _judge_mute(self, read: list[tuple[_Gpu, dict[str, float], str | None]]) -> None:
        """A GPU that answered no call this tick, for more than LOST_AFTER_INTERVALS ticks
        in a row while another GPU of the node answered, is lost (see the module doc)."""
        fresh = {g.index: bool(metrics.keys() - _CARRIED) for g, metrics, _ in read}
        answered = any(fresh.values())
        for g, _, _ in read:
            kind = self._failing.get(g.index)
            if g.lost or fresh[g.index] or kind is None:
                self._mute.pop(g.index, None)
                continue
            n = self._mute[g.index] = self._mute.get(g.index, 0) + 1
            if n > LOST_AFTER_INTERVALS and answered:
                self._set_lost(g, f"answered no NVML call for {n} ticks in a row (last error: "
                               f"{kind.upper()}) while the node's other GPUs did")
                self._muted.add(g.index)
                self._mute.pop(g.index, None)

    def _drain_xids(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        if not self._events:
            return out
        try:
            events = self.backend.xid_events_drain(MAX_XIDS_PER_TICK)
        except pynvml.NVMLError as exc:
            if isinstance(exc, pynvml.NVMLError_Uninitialized):
                raise _DriverGone from None
            self.on_error(error_kind(exc))
            return out
        known = {g.index for g in self._gpus}
        for index, xid in events:
            if not 0 < xid < 1 << 16:
                continue
            if index in known:
                out.setdefault(index, []).append(xid)
                continue
            # The backend could not map the event's handle to an index (-1): no GPU would
            # ever show it. Counted, and said once.
            self.on_dropped(UNKNOWN_GPU)
            if not self._said_unknown_gpu:
                self._said_unknown_gpu = True
                log.warning("NVML reported XID %d for a GPU it could not name (not one of this "
                            "node's %d GPUs as opened); not attributed, counted in "
                            "fleetwatch_agent_input_dropped{reason=\"%s\"}", xid,
                            len(self._gpus), UNKNOWN_GPU)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        try:
            self.backend.shutdown()
        except pynvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)

