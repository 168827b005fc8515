"""What ``NvmlReader`` reads of one GPU in a tick: the fast metrics every tick, the
batched field values, PCIe rates, GPM's activity ratios, and every ``slow_every``
ticks the slow ones (thresholds, limits, MIG mode, NVLink link state).

``GpuMetrics`` is mixed into ``collectors.nvml.reader.NvmlReader``, which owns
the backend, the one call wrapper ``_q`` and the GPUs' lifecycle; see that
module for how failures are classified.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pynvml

from fleetwatch.collectors.nvml import backend as b
from fleetwatch.collectors.nvml.backend import NvmlBackend
from fleetwatch.collectors.nvml.fields import (
    GPM,
    GPM_IDS,
    PCIE_COUNTERS,
    RAW_PARTS,
)
from fleetwatch.collectors.nvml.state import _ABSENT, T, _Gpu, error_kind

log = logging.getLogger("fleetwatch.collectors.nvml.reader")

# Metrics whose 0 is no reading: GDDR boards (L4, L40S) answer 0 instead of NotSupported
# for memory temperature, and dcgm-exporter passes that 0 on. The agent and replay
# (fleetwatch.recorded) both read it as absent, never 0.
ZERO_IS_ABSENT = frozenset({"gpu_mem_temp_c"})
class GpuMetrics:
    """The per-GPU reads of a tick (mixed into ``NvmlReader``)."""

    backend: NvmlBackend
    on_error: Callable[[str], None]
    clock: Callable[[], float]
    call_budget_s: float
    _tick: int

    if TYPE_CHECKING:  # in NvmlReader
        def _q(self, g: _Gpu, key: str, fn: Callable[..., T], *args: Any) -> T | None: ...
        def _failed(self, g: _Gpu, key: str, exc: pynvml.NVMLError) -> None: ...
        def _setup(self, g: _Gpu) -> None: ...
        def _timed(self, g: _Gpu, key: str, took: float) -> None: ...
        def _note_failure(self, g: _Gpu, key: str, kind: str) -> None: ...
        def _note_answer(self, g: _Gpu, key: str) -> None: ...
        @staticmethod
        def _batch(g: _Gpu, fields: list[tuple[int, int, str, float]]) -> None: ...

    def _read_slow(self, g: _Gpu) -> None:
        be, q, s = self.backend, self._q, g.slow
        s.clear()
        mig = q(g, "mig_mode", be.mig_mode)
        if mig is not None:
            mode = "enabled" if mig == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"
            before = g.info.get("mig_mode")
            if before != mode:
                # A new dict: frames already made keep the info they were made with.
                g.info = {**g.info, "mig_mode": mode}
            if before is not None and before != mode:
                # What the GPU supports changes with MIG: ask everything again.
                log.info("GPU %d (%s): MIG mode %s -> %s; checking what it supports again",
                         g.index, g.uuid, before, mode)
                self._setup(g)
                g.info = {**g.info, "mig_mode": mode}
        for which, name in ((b.TEMP_THRESHOLD_SLOWDOWN, "gpu_slowdown_temp_c"),
                            (b.TEMP_THRESHOLD_SHUTDOWN, "gpu_shutdown_temp_c")):
            v = q(g, name, be.temperature_threshold_c, which)
            if v is not None and v > 0:
                s[name] = float(v)
        limit = q(g, "power_limit", be.power_limit_mw)
        if limit is not None:
            s["gpu_power_limit_w"] = limit / 1000.0
        # The SKU's own limit (an A100-SXM4-80GB's is 500 W, its data sheet's TDP 400 W):
        # the line "above TDP" is drawn at (pipeline/energy_settings.py).
        default = q(g, "power_default_limit", be.power_default_limit_mw)
        if default is not None and default > 0:
            s["gpu_power_default_limit_w"] = default / 1000.0
        grid = q(g, "grid_license", be.grid_license)
        if grid is not None:
            # As DCGM reports it: 1 licensed, 0 otherwise (also where there is no vGPU).
            s["gpu_vgpu_licensed"] = 1.0 if grid[0] and grid[1] else 0.0
        if g.nvlinks:
            g.links_down = self._links_down(g)

    def _links_down(self, g: _Gpu) -> float | None:
        """Links the GPU has that are not active; None (unknown) if any state call failed.

        Link state is one call per link (up to 18): read on the slow cadence. A failed
        call is not a link up: counting it as one would report "0 down" for a GPU
        whose NVLink we cannot see at all.
        """
        down = 0
        for link in range(g.nvlinks):
            try:
                active = self.backend.nvlink_active(g.index, link)
            except pynvml.NVMLError as exc:
                if exc.value in _ABSENT:
                    continue  # not a link of this GPU
                self._failed(g, f"nvlink_state_{link}", exc)
                return None
            down += not active
        return float(down)

    def _read_fast(self, g: _Gpu, m: dict[str, float]) -> None:
        # The hot loop: failures go to the same _failed as _q's, without _q's per-call cost.
        i, skipped, slowed, budget = g.index, len(g.skip), g.slowed, self.call_budget_s
        clock = time.perf_counter
        for key, names, fn, args, scale in g.probes:
            if slowed and slowed.get(key, 0) > self._tick:
                continue  # it took too long: asked again on the slow cadence
            t0 = clock()
            try:
                v = fn(i, *args)
            except pynvml.NVMLError as exc:
                self._timed(g, key, clock() - t0)
                self._failed(g, key, exc)
                continue
            took = clock() - t0
            if took > budget or key in slowed:
                self._timed(g, key, took)
            if g.failing and key in g.failing:
                self._note_answer(g, key)
            if scale:
                m[names[0]] = v * scale
            else:  # a tuple answer: one metric per element
                for name, x in zip(names, v, strict=True):
                    if x is not None:
                        m[name] = float(x)
        if len(g.skip) != skipped:
            g.probes = [p for p in g.probes if p[0] not in g.skip]
        self._read_fields(g, m)
        if g.links_down is not None:
            m["gpu_nvlink_links_down"] = g.links_down
        if g.gpm:
            self._read_gpm(g, m)
        if "gpu_gr_engine_active_ratio" not in m and "gpu_util_pct" in m:
            m["gpu_gr_engine_active_ratio"] = m["gpu_util_pct"] / 100.0

    def _read_fields(self, g: _Gpu, m: dict[str, float]) -> None:
        if not g.fields:
            return
        res = self._q(g, "field_values", self.backend.field_values, g.request)
        if res is None:
            return
        dropped = False
        for (name, scale), (code, value) in zip(g.outputs, res, strict=True):
            if code == 0:
                m[name] = value * scale
                if g.failing and name in g.failing:
                    self._note_answer(g, name)
            elif code == pynvml.NVML_ERROR_GPU_IS_LOST:
                self._failed(g, name, pynvml.NVMLError_GpuIsLost())
            elif code in _ABSENT:
                dropped = True
            else:
                kind = error_kind(pynvml.NVMLError(code))
                self.on_error(kind)
                self._note_failure(g, name, kind)
        if dropped:
            # Ask next time only for what this GPU answers.
            keep = {f for f, (code, _) in zip(g.fields, res, strict=True) if code not in _ABSENT}
            self._batch(g, [f for f in g.fields if f in keep])
        tx, rx = (m.pop(part, None) for part in RAW_PARTS)
        if tx is not None and rx is not None:
            m["gpu_nvlink_raw_bytes_total"] = tx + rx
        for name in ZERO_IS_ABSENT:
            if m.get(name) == 0.0:
                del m[name]
        if g.pcie_counters:
            self._pcie_rates(g, m)

    def _pcie_rates(self, g: _Gpu, m: dict[str, float]) -> None:
        now = self.clock()
        for _, _, name, _ in PCIE_COUNTERS:
            total = m.pop(name, None)  # the batch put the byte count under the rate's name
            if total is None:
                continue
            prev = g.pcie_prev.get(name)
            g.pcie_prev[name] = (now, total)
            # First tick: no rate yet. A smaller count: the counter wrapped; skip one tick.
            if prev is not None and now > prev[0] and total >= prev[1]:
                m[name] = (total - prev[1]) / (now - prev[0])

    def _read_gpm(self, g: _Gpu, m: dict[str, float]) -> None:
        res = self._q(g, "gpm", self.backend.gpm_metrics, GPM_IDS)
        if res is None and "gpm" in g.skip:  # NotSupported now: no longer the ratios' source
            g.gpm = False
            g.info = {**g.info, "profiling": "none"}
        if not res:
            return
        for (_mid, name), (code, value) in zip(GPM, res, strict=True):
            if code == 0 and 0.0 <= value <= 100.0:
                m[name] = value / 100.0  # GPM answers percent; ours are ratios
