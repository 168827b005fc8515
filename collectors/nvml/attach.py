"""How ``NvmlReader`` attaches each GPU on its own and looks again every ``slow_every``
ticks: GPUs that appeared are attached, lost ones probed (after a reset they answer),
each GPU's batched fields and probes set up from what it answers (again when its MIG
mode changes), and the NVML XID event set registered.

``GpuAttach`` is mixed into ``collectors.nvml.reader.NvmlReader``, which owns the
backend, the one call wrapper ``_q`` and the tick; see that module for how failures
are classified.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import pynvml

from fleetwatch.collectors.nvml import backend as b
from fleetwatch.collectors.nvml.backend import NvmlBackend
from fleetwatch.collectors.nvml.fields import (
    FIELDS,
    GPM_IDS,
    NVLINK_FIELDS,
    PCIE_COUNTERS,
    PCIE_PROBES,
    PROBES,
)
from fleetwatch.collectors.nvml.pool import GpuPool
from fleetwatch.collectors.nvml.state import (
    _CARRIED,
    StateCallback,
    T,
    _DriverGone,
    _Gpu,
    _GpuLost,
    error_kind,
)

log = logging.getLogger("fleetwatch.collectors.nvml.reader")


class GpuAttach:
    """Attaching GPUs, and the slow look again (mixed into ``NvmlReader``)."""

    backend: NvmlBackend
    on_error: Callable[[str], None]
    on_state: StateCallback
    driver: str
    _gpus: list[_Gpu]
    _events: bool
    kernel_log: bool
    _pool: GpuPool[Any] | None
    _mute: dict[int, int]
    _muted: set[int]

    if TYPE_CHECKING:  # in NvmlReader and GpuMetrics
        def _q(self, g: _Gpu, key: str, fn: Callable[..., T], *args: Any) -> T | None: ...
        def _read_fast(self, g: _Gpu, m: dict[str, float]) -> None: ...

    def _discover(self) -> None:
        be = self.backend
        self.driver = be.driver_version()
        for i in range(be.device_count()):
            self._gpus.append(self._attach(i))
        self._register_events([g for g in self._gpus if not g.lost])

    def _attach(self, i: int) -> _Gpu:
        """Open GPU ``i`` alone; a GPU that cannot be opened is reported lost, not fatal."""
        be = self.backend
        g = _Gpu(i, f"GPU-unknown-{i}", "unknown", {"driver": self.driver}, [], False, 0)
        try:
            be.open(i)
        except pynvml.NVMLError as exc:
            if isinstance(exc, pynvml.NVMLError_Uninitialized):
                raise _DriverGone from None
            g.lost = True
            self.on_error(error_kind(exc))
            self.on_state(i, g.uuid, "lost", f"cannot be opened: {exc}")
            return g
        try:
            g.uuid = self._q(g, "uuid", be.uuid) or g.uuid
            g.model = self._q(g, "name", be.name) or g.model
            for key, fn in (("serial", be.serial), ("pci_bus_id", be.pci_bus_id)):
                value = self._q(g, key, fn)
                if value:
                    g.info[key] = value
            self._setup(g)
        except _GpuLost:
            pass
        return g

    def _setup(self, g: _Gpu) -> None:
        """What this GPU answers: asked at attach, and again when its MIG mode changes."""
        be = self.backend
        g.skip.clear()
        links = self._q(g, "nvlink_count", be.field_values, [(b.FI_NVLINK_LINK_COUNT, 0)])
        g.nvlinks = int(links[0][1]) if links and links[0][0] == 0 else 0
        g.gpm = bool(self._q(g, "gpm_supported", be.gpm_supported))
        pcie = self._q(g, "pcie_counters", be.field_values,
                       [(fid, scope) for fid, scope, _, _ in PCIE_COUNTERS])
        g.pcie_counters = bool(pcie) and all(code == 0 for code, _ in pcie or ())
        self._batch(g, list(FIELDS) + (list(NVLINK_FIELDS) if g.nvlinks else [])
                    + (list(PCIE_COUNTERS) if g.pcie_counters else []))
        g.probes = [(key, names, getattr(be, method), args, scale)
                    for key, names, method, args, scale in PROBES
                    if not (g.pcie_counters and key in PCIE_PROBES)]
        if g.gpm:
            self._q(g, "gpm", be.gpm_metrics, GPM_IDS)  # first sample
            # The query says GPM, but sampling may answer NotSupported (a MIG-enabled parent)
            g.gpm = "gpm" not in g.skip
        # Where SM, tensor and DRAM activity come from (DCGM may fill them in: node.py).
        g.info = {**g.info, "profiling": "gpm" if g.gpm else "none"}

    def _register_events(self, gpus: list[_Gpu]) -> None:
        if not self._events or not gpus:
            return
        try:
            accepted = set(self.backend.xid_events_open([g.index for g in gpus]))
        except pynvml.NVMLError as exc:
            if isinstance(exc, pynvml.NVMLError_Uninitialized):
                raise _DriverGone from None
            # No event set at all (e.g. in some VMs): kmsg still sees XIDs.
            log.info("NVML XID events unavailable (%s); XIDs come from the kernel log only", exc)
            self.on_error(error_kind(exc))
            self._events = False
            return
        for g in gpus:
            g.events = g.index in accepted
        none = [g for g in gpus if not g.events]
        if none:
            then = ("their XIDs come from the kernel log only" if self.kernel_log else
                    "no XID of theirs is seen: agent.kernel_log is off (set it to /dev/kmsg "
                    "to read them from the kernel log)")
            log.info("GPU %s does not deliver XID events through NVML; %s",
                     ", ".join(f"{g.index} ({g.uuid})" for g in none), then)

    def _reprobe(self) -> None:
        """The slow look: GPUs that appeared, lost GPUs that answer again."""
        be = self.backend
        try:
            count = be.device_count()
        except pynvml.NVMLError as exc:
            if isinstance(exc, pynvml.NVMLError_Uninitialized):
                raise _DriverGone from None
            self.on_error(error_kind(exc))
            return
        back: list[_Gpu] = []
        for k, g in enumerate(self._gpus):
            if not g.lost or k >= count or (self._pool is not None and self._pool.busy(k)):
                continue  # (busy: its worker is still inside NVML; asking again would block)
            fresh = self._reattach(k, trial=k in self._muted)
            if fresh is not None:
                self._muted.discard(k)
                self._mute.pop(k, None)
                self._gpus[k] = fresh
                back.append(fresh)
                self.on_state(k, fresh.uuid, "ok", "answers again (reset or re-attached)")
        for i in range(len(self._gpus), count):
            g = self._attach(i)
            self._gpus.append(g)
            if not g.lost:
                back.append(g)
                self.on_state(i, g.uuid, "ok", "appeared")
        self._register_events(back)

    def _reattach(self, i: int, trial: bool) -> _Gpu | None:
        """``_attach_quiet``; a GPU lost for answering nothing is tried in its worker,
        within the pool's budget, as its calls may still block for seconds."""
        if self._pool is None or not trial:
            return self._attach_quiet(i, trial)
        done, _ = self._pool.run({i: partial(self._attach_quiet, i, True)})
        got: _Gpu | None = done.get(i)
        return got

    def _attach_quiet(self, i: int, trial: bool = False) -> _Gpu | None:
        """``_attach`` for a GPU already reported lost: None (and no new report) if still so.

        ``trial``: it was lost for answering nothing, and its handle may still open: it is
        back only if a tick's reads give a value.
        """
        report, self.on_state = self.on_state, lambda *a: None
        try:
            g = self._attach(i)
            if trial and not g.lost:
                values: dict[str, float] = {}
                with contextlib.suppress(_GpuLost):  # GpuIsLost: g.lost is set
                    self._read_fast(g, values)
                g.lost = g.lost or not values.keys() - _CARRIED
        finally:
            self.on_state = report
        return None if g.lost else g

    @staticmethod
    def _batch(g: _Gpu, fields: list[tuple[int, int, str, float]]) -> None:
        g.fields = fields
        g.request = [(fid, scope) for fid, scope, _, _ in fields]
        g.outputs = [(name, scale) for _, _, name, scale in fields]
