"""One XID reported by both NVML events and the kernel log is counted once.

Pure logic on a clock: the node collector hands ``XidMerger`` each tick's XIDs from
both sources (``nvml`` events, ``kmsg.KernelLog``) and reports what is new.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping


class XidMerger:
    """Counts an XID seen by both NVML events and the kernel log once.

    Each report waits ``window_s`` for its twin from the other source; a twin
    within the window is the same event and is not reported again.
    """

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self._seen: dict[tuple[int, int], deque[tuple[float, str]]] = {}

    def add(self, gpu: int, xid: int, source: str) -> bool:
        """Record one report; True when it is new (not the twin of an earlier one)."""
        now = self.clock()
        q = self._seen.setdefault((gpu, xid), deque())
        while q and q[0][0] < now - self.window_s:
            q.popleft()
        for k, (_, src) in enumerate(q):
            if src != source:
                del q[k]
                return False
        q.append((now, source))
        return True

    def merge(self, nvml: Mapping[int, Iterable[int]], kernel: Iterable[tuple[int, int]]
              ) -> dict[int, list[int]]:
        """XIDs per GPU for this tick from both sources, each event once, NVML's first."""
        out: dict[int, list[int]] = {}
        for gpu, xids in nvml.items():
            for x in xids:
                if self.add(gpu, x, "nvml"):
                    out.setdefault(gpu, []).append(x)
        for gpu, x in kernel:
            if self.add(gpu, x, "kmsg"):
                out.setdefault(gpu, []).append(x)
        return out
