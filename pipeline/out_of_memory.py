"""Out of memory in the processor: how it is recognised (``out_of_memory``), how many in a
row the loop (``pipeline.consume_pause``) bears before it gives up (``OutOfMemory``), and
the line that says why it stops and what becomes of the batches in hand. Pure.
"""

from __future__ import annotations

import errno

# Memory errors (``MemoryError``, "can't start new thread") in a row, with no batch
# finished between, before the loop gives up (``OutOfMemory``): a process at its memory
# limit does not recover by waiting, and only its supervisor can restart it.
MEMORY_ERRORS_MAX = 3


class OutOfMemory(RuntimeError):
    """The processor cannot go on for lack of memory: exit non-zero, to be restarted."""


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the process ran out of memory (or of the address space that
    a new thread's stack needs: ``ulimit -v``, a cgroup limit)."""
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)) or (
        isinstance(exc, OSError) and exc.errno == errno.ENOMEM)


def out_of_memory_said(exc: BaseException, times: int, replays: bool = True) -> str:
    """Why the loop stops for lack of memory, and what becomes of the batches in hand:
    replayed by the next owner, or, over a bus that lives in the process (``fleetwatch
    up``: ``replays`` false), lost with it."""
    then = ("stopping so that its supervisor (systemd, Kubernetes) restarts it: the batches "
            "in hand are replayed" if replays else
            "stopping: the frames in hand were not stored, and nothing replays them")
    return (f"out of memory ({type(exc).__name__}: {exc}) {times} times in a row: the process "
            "has reached its memory limit (ulimit -v, or its cgroup's / container's memory "
            f"limit); {then}. Give it more memory if this repeats")
