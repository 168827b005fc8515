"""Hourly energy totals already read, kept until a write says their hour changed.

A ledger hour is summed from every rewrite of every row in it, which on
VictoriaMetrics means scanning all of them again on every read: at 8,000 GPUs
the energy page took 30-60 s. Most hours in a window never change again, but
some do (a node back from a silence books its missing time into past hours, a
processor catching up a backlog writes old hours), so an hour is never kept
on the clock's word: every ``write_energy`` also writes one marker per hour it
touched (``fleetwatch_energyhour_written{bucket}``, stamped with the writer's
wall clock), and a reader drops the hours whose markers it finds since it last
looked (less a margin for flush delay and clock skew) before answering.

Pure: the store makes the queries and passes what they said.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from fleetwatch.pipeline.store.ledger import BUCKET_S

# An hour's ``EnergyTotal`` lines for one grouping, or its ``EnergyRow`` rows (``ROWS``).
Lines = list[Any]
# The grouping under which whole hours of rows are kept (not one of ``TOTAL_KEYS``).
ROWS = "rows"

# Markers written up to this long before the last look, or after now, still count: a
# write becomes searchable a second or so after it is taken (more under load), and the
# processor's clock may differ from the dashboard's. So an hour is read again for this
# long after its last write, then kept.
MARGIN_S = 300.0
# Lines kept at most (~300 bytes each; an hour by job is a few hundred lines, by cluster a
# few): a month of a fleet running 300 jobs at once, the oldest hours dropped first.
MAX_LINES = 250_000


class HourCache:
    """Per (``by``, hour): that hour's totals, as last read. Thread-safe (the dashboard
    answers callbacks on several threads)."""

    def __init__(self, margin_s: float = MARGIN_S, max_lines: int = MAX_LINES) -> None:
        self.margin_s = margin_s
        self.max_lines = max_lines
        self._lines = 0
        self._hours: dict[tuple[str, int], Lines] = {}
        self._lock = threading.Lock()
        self._looked_ts: float | None = None  # when markers were last read
        self._epoch = 0  # bumped whenever an hour is dropped

    def lookback(self, now_ts: float) -> tuple[float, float] | None:
        """The span of marker stamps to read now, [since, until]; None: nothing is kept,
        so nothing need be read."""
        with self._lock:
            if self._looked_ts is None or not self._hours:
                return None
            return self._looked_ts - self.margin_s, now_ts + self.margin_s

    def changed(self, buckets: Iterable[int], now_ts: float) -> int:
        """Forget these hours (markers found in the span ``lookback`` gave); returns the
        epoch that the reads made after this may be kept under (``put``)."""
        gone = set(buckets)
        with self._lock:
            dropped = [k for k in self._hours if k[1] in gone]
            for k in dropped:
                self._lines -= len(self._hours.pop(k))
            if dropped:
                self._epoch += 1
            self._looked_ts = now_ts
            return self._epoch

    def get(self, by: str, buckets: Iterable[int]) -> dict[int, Lines]:
        """The kept hours among ``buckets``."""
        with self._lock:
            return {b: self._hours[(by, b)] for b in buckets if (by, b) in self._hours}

    def put(self, by: str, totals: dict[int, Lines], epoch: int) -> None:
        """Keep hours read after ``changed`` returned ``epoch``; not if an hour was dropped
        since (the read may predate the write that dropped it)."""
        with self._lock:
            if epoch != self._epoch:
                return
            for bucket, lines in totals.items():
                self._lines += len(lines) - len(self._hours.pop((by, bucket), ()))
                self._hours[(by, bucket)] = lines
            if self._lines > self.max_lines:
                for k in sorted(self._hours, key=lambda k: k[1]):
                    self._lines -= len(self._hours.pop(k))
                    if self._lines <= self.max_lines:
                        break


def runs(buckets: Iterable[int], max_steps: int) -> list[tuple[int, int]]:
    """Sorted hour starts as (first, last) runs of consecutive hours, at most ``max_steps``
    hours each: one range query per run."""
    out: list[tuple[int, int]] = []
    for b in sorted(set(buckets)):
        if out and b == out[-1][1] + BUCKET_S and (b - out[-1][0]) // BUCKET_S < max_steps:
            out[-1] = (out[-1][0], b)
        else:
            out.append((b, b))
    return out
