"""Records the store refuses for good: events, alert changes, energy ledger rows.

Frames are bisected into dead letters (``pipeline.batches.bisect``); the records the
processor derives from them go the same way, without a dead-letter topic (they can be
derived again only from the frames): the store is asked to take them in halves, down
to single records, and what it still refuses is counted by kind of record
(``fleetwatch_processor_records_refused``) and logged with the server's reason, a
WARNING a minute at most per kind. Nothing of it stops the batch: its frames are
committed and its alerts judged and sent (a store that refuses the events write for
good, InfluxDB's ``max-series-per-database`` say, used to hold the batch for ever).

InfluxDB 1.x's "partial write" answers say the server stored the other lines of the
request and dropped ``dropped=N``: those are counted as refused without asking again.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from fleetwatch.pipeline.store.base import StoreError, StoreRejected
from fleetwatch.pipeline.store.influx_schema import advice, refused_conflict

log = logging.getLogger("fleetwatch.pipeline.processor")

T = TypeVar("T")

_DROPPED = re.compile(r"dropped=(\d+)")
# At most this many single-record writes are tried for one refused write: beyond, the rest
# is counted as refused with the first reason (a refusal of every record costs no more
# than this many requests a batch).
MAX_SINGLE_TRIES = 64


def partial_dropped(reason: str) -> int | None:
    """The lines a "partial write" answer dropped (the others are stored); None: not one."""
    if "partial write" not in reason:
        return None
    m = _DROPPED.search(reason)
    return int(m.group(1)) if m else 0


def write_what_is_taken(write: Callable[[list[T]], object], records: Sequence[T],
                        exc: StoreRejected) -> list[tuple[int, str]]:
    """After ``write(records)`` raised ``exc``: store what the store takes of ``records``
    (halves, down to single records) and return, for what it refused, (how many, reason).
    ``StoreError`` (the store is away) is raised as it is."""
    dropped = partial_dropped(exc.reason)
    if dropped is not None:  # the server stored the other lines itself
        return [(dropped or len(records), exc.reason)]
    out: list[tuple[int, str]] = []
    todo: list[tuple[list[T], StoreRejected]] = [(list(records), exc)]
    singles = 0
    while todo:
        part, err = todo.pop()
        if len(part) == 1 or singles >= MAX_SINGLE_TRIES:
            out.append((len(part), err.reason))
            continue
        half = len(part) // 2
        for sub in (part[:half], part[half:]):
            singles += len(sub) == 1
            try:
                write(sub)
            except StoreError:
                raise
            except StoreRejected as e:
                todo.append((sub, e))
    return out


class Refusals:
    """Counts and says what the store refused for good, by kind of record."""

    def __init__(self, counts: dict[str, int], database: str | None = None,
                 log_every_s: float = 60.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.counts = counts  # the processor's Stats.records_refused
        self.database = database
        self.log_every_s = log_every_s
        self._clock = clock
        self._said: dict[str, float] = {}
        self._unsaid: dict[str, int] = {}

    def write(self, what: str, write: Callable[[list[T]], object], records: Sequence[T]
              ) -> int:
        """``write(records)``; what the store refuses for good is counted and said, the
        rest stored. Returns how many were refused. Raises ``StoreError`` as ``write``."""
        if not records:
            return 0
        try:
            write(list(records))
            return 0
        except StoreRejected as exc:
            refused = write_what_is_taken(write, records, exc)
        n = sum(k for k, _ in refused)
        self.said(what, n, refused[0][1])
        return n

    def said(self, what: str, n: int, reason: str) -> None:
        """Count ``n`` refused records of kind ``what``; a WARNING at most every
        ``log_every_s`` a kind, with the count of those not said since."""
        self.counts[what] = self.counts.get(what, 0) + n
        now = self._clock()
        last = self._said.get(what)
        if last is not None and now - last < self.log_every_s:
            self._unsaid[what] = self._unsaid.get(what, 0) + n
            return
        self._said[what] = now
        before = self._unsaid.pop(what, 0)
        since = f" (and {before} more since the last such warning)" if before else ""
        log.warning("the store refused %d %s for good%s: %s%s; not retried, the batch goes on "
                    "(fleetwatch_processor_records_refused{record=\"%s\"})", n, what, since,
                    reason, self.advice(reason), what)

    def advice(self, reason: str) -> str:
        """What to do about a refusal, where the server's reason says ("" otherwise)."""
        conflict = refused_conflict(reason)
        if conflict is not None:
            return f". {advice(self.database or '?', conflict[0])}"
        if "max-series-per-database" in reason or "max-values-per-tag" in reason:
            return (". InfluxDB's series limit is reached: raise max-series-per-database / "
                    "max-values-per-tag in influxdb.conf (0: no limit), or shorten the "
                    "retention policy so that old series go")
        return ""
