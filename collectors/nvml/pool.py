"""Each GPU's reads of a tick in its own worker thread, waited for at most a budget.

One GPU whose NVML calls hang (a GSP that stopped answering RPCs, a call that blocks
for seconds) must not stop the others' samples nor make the node's frames late. The
tick waits ``budget_s`` for every GPU together; a GPU not done by then gives no values
this tick (never values read later, under an earlier frame's time), and is not asked
again while its worker is still inside NVML, so at most one worker per GPU. NVML
is thread-safe (NVML API Reference: "safe to make simultaneous NVML calls from
multiple threads").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Generic, TypeVar

R = TypeVar("R")


class GpuPool(Generic[R]):
    """``run({gpu index: read})``: the results of those done within ``budget_s``."""

    def __init__(self, budget_s: float, workers: int = 64) -> None:
        self.budget_s = budget_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nvml-gpu")
        self._busy: dict[int, Future[R]] = {}
        self._since: dict[int, float] = {}  # GPU index -> when its busy read began

    def busy(self, index: int) -> bool:
        """Is a worker still inside NVML for this GPU (from this tick or an earlier one)?"""
        f = self._busy.get(index)
        return f is not None and not f.done()

    def busy_for(self, index: int) -> float:
        """How long this GPU's worker has been inside its read (0: none is)."""
        return time.monotonic() - self._since[index] if self.busy(index) else 0.0

    def run(self, reads: Mapping[int, Callable[[], R]]) -> tuple[dict[int, R], list[int]]:
        """(results by GPU index, the GPUs not done within the budget). A read's exception
        is raised here; a read that ends after its tick is dropped with its values."""
        for i, f in list(self._busy.items()):
            if f.done():
                del self._busy[i]  # late: read under an earlier frame's time, not used
        fresh = {i: self._pool.submit(read) for i, read in reads.items() if i not in self._busy}
        self._busy.update(fresh)
        now = time.monotonic()
        self._since.update(dict.fromkeys(fresh, now))
        if fresh:
            wait(list(fresh.values()), timeout=self.budget_s)
        out: dict[int, R] = {}
        for i, f in fresh.items():
            if f.done():
                del self._busy[i]
                out[i] = f.result()
        return out, [i for i in reads if i not in out]

    def close(self) -> None:
        # A worker stuck inside NVML is not waited for: it ends when its call returns.
        self._pool.shutdown(wait=False, cancel_futures=True)
