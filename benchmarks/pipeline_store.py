"""The store-watching part of ``benchmarks/pipeline.py``: VictoriaMetrics' own
counters, read to check that every point of a run arrived and to wait until
the server is idle before the next timed run.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable


def vm_metric(url: str, prefix: str) -> float:
    """The sum of VictoriaMetrics' own metrics whose line starts with ``prefix``."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix))


def rows_received(url: str) -> int:
    """Rows VictoriaMetrics has taken in over line protocol since it started."""
    return int(vm_metric(url, 'vm_rows_inserted_total{type="influx"}'))


def settle(url: str, what: str, say: Callable[[str], None],
           timeout_s: float = 120.0) -> None:
    """Wait until VictoriaMetrics is idle: no merges, under 5% of a core for a second.

    After a run, the server merges the parts it just wrote for a while; without
    this, that work lands on (and slows) whichever run comes next.
    """
    started = time.monotonic()
    cpu = vm_metric(url, "process_cpu_seconds_total")
    while time.monotonic() - started < timeout_s:
        time.sleep(1.0)
        now = vm_metric(url, "process_cpu_seconds_total")
        if now - cpu < 0.05 and vm_metric(url, "vm_active_merges") == 0:
            say(f"store idle before {what} (waited {time.monotonic() - started:.0f}s)")
            return
        cpu = now
    say(f"store still busy after {timeout_s:.0f}s; measuring {what} anyway")


def check_received(url: str, before: int, expected: int, what: str,
                   say: Callable[[str], None]) -> int:
    """Every point of the run reached the store (the figures are void otherwise)."""
    # The counter moves when the server moves rows from its in-memory buffer to
    # storage, about once a second: a short run can end before it has.
    deadline = time.monotonic() + 10
    while (after := rows_received(url)) - before < expected and time.monotonic() < deadline:
        time.sleep(0.5)
    if after - before < expected:
        raise RuntimeError(f"{what}: the store received {after - before:,} rows, "
                           f"not the {expected:,} written")
    say(f"{what}: the store received {after - before:,} rows ({expected:,} expected)")
    return after
