"""The SQLite store's one-minute rollups and upkeep: (count, sums, minimums, maximums) per
device, minute and layout, computed from its packed rows (a pure function: the store
writes what it returns), and what ``SqliteStore.maintain`` does to the file: samples,
rollups, events and the alert history past their retention."""

from __future__ import annotations

import sqlite3
import time
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from fleetwatch.pipeline.store.base import MINUTE_MS

# Minutes younger than this are not rolled up from raw yet: late points may still come.
ROLLUP_GRACE_MS = 2 * MINUTE_MS
# Raw rows past retention: deleted this much data per transaction, for about this long a call.
RAW_SLICE_MS = MINUTE_MS
UPKEEP_BUDGET_S = 2.0

Row = tuple[int, int, int, bytes]  # (ts, device id, layout id, packed values)
# (did, minute, layout, n, sums, mins, maxs)
Rollup = tuple[int, int, int, int, bytes, bytes, bytes]


def upkeep(conn: sqlite3.Connection, now_ms: int, raw_retention_ms: int,
           rollup_retention_ms: int, budget_s: float = UPKEEP_BUDGET_S) -> bool:
    """Close the dirty minutes that are old enough (their rollups from the raw rows) and
    drop what is past retention; True when no raw row past retention is left.

    The raw rows go a minute of data per transaction, for about ``budget_s`` a call (at
    least one minute): the processor waits for upkeep, and at 8,000 GPUs a quarter of an
    hour's rows took 35 s to delete in one transaction. What is left goes at the next
    call; two calls a minute delete faster than data comes."""
    with conn:
        closed = now_ms - ROLLUP_GRACE_MS
        for (minute,) in conn.execute("SELECT minute FROM dirty_minutes WHERE minute < ?",
                                      (closed - MINUTE_MS,)).fetchall():
            rows = conn.execute("SELECT ts, did, layout, vals FROM samples "
                                "WHERE ts >= ? AND ts < ?",
                                (minute, minute + MINUTE_MS)).fetchall()
            if rows:
                complete, _ = rollup(rows, whole=True)
                conn.executemany("INSERT OR REPLACE INTO rollup_1m "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?)", complete)
            conn.execute("DELETE FROM dirty_minutes WHERE minute = ?", (minute,))
        # Per device on the (device, minute) key: ``WHERE ts < ?`` alone reads the whole
        # table (a week of 1,000 GPUs: 11 million rows) on every call.
        conn.execute("DELETE FROM rollup_1m WHERE did IN (SELECT id FROM devices) AND ts < ?",
                     (now_ms - rollup_retention_ms,))
        # Events are few and what a month's report reads: kept as long as rollups.
        horizon = now_ms - rollup_retention_ms
        if conn.execute("DELETE FROM events WHERE ts_ms < ?", (horizon,)).rowcount > 0:
            # Remembered, so that a report of those days says why it names no offender.
            conn.execute("INSERT OR REPLACE INTO pruned VALUES ('events', ?)", (horizon,))
        prune_records(conn, now_ms / 1000, raw_retention_ms / 1000, rollup_retention_ms / 1000)
    return drop_raw(conn, now_ms - raw_retention_ms, budget_s)


def drop_raw(conn: sqlite3.Connection, cutoff_ms: int, budget_s: float) -> bool:
    """Raw rows before ``cutoff_ms``, a minute of data a transaction (the oldest first,
    on the table's (ts, device) key), until none is left or ``budget_s`` has passed."""
    deadline = time.monotonic() + budget_s
    while True:
        (oldest,) = conn.execute("SELECT MIN(ts) FROM samples").fetchone()
        if oldest is None or oldest >= cutoff_ms:
            return True
        with conn:
            conn.execute("DELETE FROM samples WHERE ts < ?",
                         (min(cutoff_ms, oldest + RAW_SLICE_MS),))
        if time.monotonic() >= deadline:
            return False


def prune_records(conn: sqlite3.Connection, now_s: float, raw_retention_s: float,
                  rollup_retention_s: float) -> None:
    """Drop the alert history past retention; an open alert (and its acknowledgement) never.

    An alert that fired is history as events are (kept as long as rollups, from when it
    resolved); one that resolved while still pending notified no one and is kept as long
    as the raw samples that showed it. A silence is kept as long as rollups after its
    end; an acknowledgement as long, once its alert is gone from the store.
    """
    history = now_s - rollup_retention_s
    conn.execute("DELETE FROM alert_states WHERE state = 'resolved' AND updated_ts < ? "
                 "AND fired_ts IS NOT NULL", (history,))
    conn.execute("DELETE FROM alert_states WHERE state = 'resolved' AND updated_ts < ? "
                 "AND fired_ts IS NULL", (now_s - raw_retention_s,))
    conn.execute("DELETE FROM silences WHERE end_ts < ?", (history,))
    conn.execute("DELETE FROM acks WHERE ts < ? AND alert_id NOT IN "
                 "(SELECT id FROM alert_states)", (history,))


def rollup(rows: Sequence[Row], whole: bool = False) -> tuple[list[Rollup], set[int]]:
    """1-minute aggregates of a batch of rows: those it holds whole, and the minutes it may not.

    A node's frames arrive in order, so for each device only its first and last
    minute in a batch can be partial (the rest of them is in the batch before
    or after). Those are marked dirty and recomputed from the raw rows once the
    minute has closed (``whole=True``: the rows are all there is of their
    minutes); every other (device, minute) is complete here, and writing it
    again on a replay gives the same row.
    """
    groups: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for row in rows:
        groups[(row[1], row[2])].append(row)
    complete: list[Rollup] = []
    dirty: set[int] = set()
    for (did, lid), group in groups.items():
        group.sort()
        ts = np.fromiter((r[0] for r in group), np.int64, len(group))
        values = np.frombuffer(b"".join(r[3] for r in group), np.float64).reshape(len(group), -1)
        minute = ts - ts % MINUTE_MS
        starts = np.flatnonzero(np.r_[True, minute[1:] != minute[:-1]])
        counts = np.diff(np.r_[starts, len(minute)])
        sums = np.add.reduceat(values, starts, axis=0)
        mins = np.minimum.reduceat(values, starts, axis=0)
        maxs = np.maximum.reduceat(values, starts, axis=0)
        minutes = minute[starts].tolist()
        keep = range(len(starts)) if whole else range(1, len(starts) - 1)
        if not whole:
            dirty.add(minutes[0])
            dirty.add(minutes[-1])
        complete.extend((did, minutes[k], lid, int(counts[k]), sums[k].tobytes(),
                         mins[k].tobytes(), maxs[k].tobytes()) for k in keep)
    return complete, dirty
