"""What the NVML reader says of calls that fail or are slow, once per GPU and call.

``CallWatch`` is mixed into ``collectors.nvml.reader.NvmlReader``: a call or field that
starts failing (not "not supported", which is absent by design) is said once, and again
with its count when it answers; a call slower than ``call_budget_s`` is left out on that
GPU and asked again every ``slow_every`` ticks (each time it may block the GPU's reads
that long), said once each way.
"""

from __future__ import annotations

import logging

from fleetwatch.collectors.nvml.state import _Gpu

log = logging.getLogger("fleetwatch.collectors.nvml.reader")

CALL_BUDGET_S = 0.5  # see CallWatch.call_budget_s
# Calls of one GPU said to fail, each on its own line; more are said in one line.
MAX_SAID_FAILING = 4


def _nvml_word(kind: str) -> str:
    """``gpu_is_lost`` -> ``GpuIsLost``: NVML's own name for the error, as its docs spell it."""
    return "".join(part.capitalize() for part in kind.split("_"))


class CallWatch:
    """Failing and slow calls, per GPU and call (mixed into ``NvmlReader``)."""

    slow_every: int
    _tick: int

    def __init__(self) -> None:
        # A single NVML call longer than this is left out (see _timed); every call the
        # agent makes normally answers in milliseconds (PCIe throughput: 20 ms).
        self.call_budget_s = CALL_BUDGET_S
        self._said_slow: set[tuple[int, str]] = set()  # (GPU, call) said to be slow

    def _note_failure(self, g: _Gpu, key: str, kind: str) -> None:
        """A call or field that fails (not "not supported"): said once per GPU and call
        when it starts failing, with the count when it answers again."""
        was = g.failing.get(key)
        g.failing[key] = (kind, (was[1] if was else 0) + 1)
        if was is not None:
            return
        if len(g.failing) <= MAX_SAID_FAILING:
            log.warning("GPU %d (%s) %s: NVML %s; reported absent until it answers (counted "
                        "in fleetwatch_agent_nvml_errors_total{kind=\"%s\"})", g.index, g.uuid,
                        key, _nvml_word(kind), kind)
        elif len(g.failing) == MAX_SAID_FAILING + 1:
            log.warning("GPU %d (%s): more NVML calls fail (%s, ...): not each said; all "
                        "reported absent", g.index, g.uuid, key)

    def _note_answer(self, g: _Gpu, key: str) -> None:
        kind, n = g.failing.pop(key)
        log.info("GPU %d (%s) %s answers again after %d failed read%s (NVML %s)", g.index,
                 g.uuid, key, n, "" if n == 1 else "s", _nvml_word(kind))

    def _timed(self, g: _Gpu, key: str, took: float) -> None:
        """A call over its budget is left out, and asked again every ``slow_every`` ticks
        (each time it may block the GPU's reads that long); said once each way."""
        if took > self.call_budget_s:
            g.slowed[key] = self._tick + self.slow_every
            if (g.index, key) not in self._said_slow:
                self._said_slow.add((g.index, key))
                log.warning("GPU %d (%s): NVML call %s took %.1f s, over its %.2f s budget: "
                            "left out (its values absent) and asked again every %d ticks "
                            "until it answers in time", g.index, g.uuid, key, took,
                            self.call_budget_s, self.slow_every)
        elif g.slowed.pop(key, None) is not None:
            self._said_slow.discard((g.index, key))
            log.info("GPU %d (%s): NVML call %s answers in time again (%.2f s)", g.index,
                     g.uuid, key, took)
