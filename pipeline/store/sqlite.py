"""The embedded store: one SQLite file in WAL mode.

WAL lets a dashboard in another process (or thread) read while the processor
writes. The layout is the line-protocol one: a row per device per instant,
holding all of that device's metrics as packed float64s, keyed (ts, device)
so that writes append at the end of the B-tree. That is ~10x fewer rows than
one per metric, which is what makes a week of a fleet load in seconds. A
``layouts`` table names the metrics in each packed row; a device whose metric
set changes (a GPU lost, a metric no longer supported) simply gets a new
layout. One-minute rollups (count, sums, minimums, maximums) are keyed
(device, minute, layout) for long-range reads of one device. Writes are
``INSERT OR REPLACE``: writing a device's instant twice keeps one row.
"""

from __future__ import annotations

import json
import sqlite3
import struct
import threading
from array import array
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import (
    MINUTE_MS,
    RAW_SPAN_MS,
    Acknowledgement,
    Point,
    SeriesKey,
    Silence,
    StoreError,
    gpu_device,
)
from fleetwatch.pipeline.store.energy_sqlite import SqliteEnergy
from fleetwatch.pipeline.store.sqlite_records import SqliteRecords, guarded

# Minutes younger than this are not rolled up from raw yet: late points may still come.
ROLLUP_GRACE_MS = 2 * MINUTE_MS

Ident = tuple[str, str, str, str]  # (cluster, rack, node, device)
Row = tuple[int, int, int, bytes]  # (ts, device id, layout id, packed values)
# (did, minute, layout, n, sums, mins, maxs)
Rollup = tuple[int, int, int, int, bytes, bytes, bytes]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    id INTEGER PRIMARY KEY, cluster TEXT NOT NULL, rack TEXT NOT NULL, node TEXT NOT NULL,
    device TEXT NOT NULL, UNIQUE (cluster, rack, node, device));
CREATE TABLE IF NOT EXISTS layouts (id INTEGER PRIMARY KEY, metrics TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS samples (
    ts INTEGER NOT NULL, did INTEGER NOT NULL, layout INTEGER NOT NULL, vals BLOB NOT NULL,
    PRIMARY KEY (ts, did)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_1m (
    did INTEGER NOT NULL, ts INTEGER NOT NULL, layout INTEGER NOT NULL, n INTEGER NOT NULL,
    sums BLOB NOT NULL, mins BLOB NOT NULL, maxs BLOB NOT NULL,
    PRIMARY KEY (did, ts, layout)) WITHOUT ROWID;
-- Minutes whose rollups must be recomputed from raw samples once they close.
CREATE TABLE IF NOT EXISTS dirty_minutes (minute INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS silences (
    id TEXT PRIMARY KEY, matchers TEXT NOT NULL, start_ts REAL NOT NULL, end_ts REAL NOT NULL,
    created_by TEXT NOT NULL, comment TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS acks (
    alert_id TEXT PRIMARY KEY, ts REAL NOT NULL, by TEXT NOT NULL, comment TEXT NOT NULL);
"""


class SqliteStore(SqliteRecords, SqliteEnergy):
    """Frames, alerts, annotations and events in one SQLite file (alerts, annotations and
    events: ``SqliteRecords``; the energy ledger: ``SqliteEnergy``). ``busy_timeout_s``: how
    long a write waits for another writer's lock before it fails with ``StoreError`` (the
    processor retries later)."""

    def __init__(self, path: str | Path, raw_retention_h: float = 14 * 24,
                 rollup_retention_d: float = 400, read_only: bool = False,
                 busy_timeout_s: float = 30.0) -> None:
        self.path = str(path)
        self.busy_timeout_s = busy_timeout_s
        self.raw_retention_ms = int(raw_retention_h * 3600 * 1000)
        self.rollup_retention_ms = int(rollup_retention_d * 86400 * 1000)
        self._read_only = read_only
        self._local = threading.local()
        self._lock = threading.Lock()
        self._dids: dict[Ident, int] = {}
        self._idents: dict[int, Ident] = {}
        self._layouts: dict[tuple[str, ...], int] = {}
        self._names: dict[int, tuple[str, ...]] = {}
        self._index: dict[int, dict[str, int]] = {}
        if not read_only:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._open()

    @guarded("schema setup")
    def _open(self) -> None:
        conn = self._conn()
        conn.executescript(_SCHEMA)
        self._create_records(conn)

    # -- connections: one per thread, since sqlite3 connections are not shareable
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._read_only:
                if not Path(self.path).exists():
                    raise StoreError(f"no store at {self.path}: run `fleetwatch up` or "
                                     "`fleetwatch simulate` first, or point store.path at one")
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       check_same_thread=False, timeout=self.busy_timeout_s)
            else:
                conn = sqlite3.connect(self.path, check_same_thread=False,
                                       timeout=self.busy_timeout_s)
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            self._local.conn = conn
        return conn

    # -- ids for devices and layouts, cached; new ones are created on first sight
    def _did(self, ident: Ident) -> int:
        did = self._dids.get(ident)
        if did is None:
            with self._lock:
                conn = self._conn()
                with conn:
                    conn.execute("INSERT OR IGNORE INTO devices (cluster, rack, node, device) "
                                 "VALUES (?, ?, ?, ?)", ident)
                (did,) = conn.execute("SELECT id FROM devices WHERE cluster = ? AND rack = ? "
                                      "AND node = ? AND device = ?", ident).fetchone()
                self._dids[ident], self._idents[did] = did, ident
        return did

    def _layout(self, names: tuple[str, ...]) -> int:
        lid = self._layouts.get(names)
        if lid is None:
            with self._lock:
                conn = self._conn()
                text = ",".join(names)
                with conn:
                    conn.execute("INSERT OR IGNORE INTO layouts (metrics) VALUES (?)", (text,))
                (lid,) = conn.execute("SELECT id FROM layouts WHERE metrics = ?",
                                      (text,)).fetchone()
                self._remember_layout(lid, names)
        return lid

    def _remember_layout(self, lid: int, names: tuple[str, ...]) -> None:
        self._layouts[names], self._names[lid] = lid, names
        self._index[lid] = {name: i for i, name in enumerate(names)}

    def _refresh(self) -> None:
        """Learn devices and layouts another process (the writer) created."""
        conn = self._conn()
        for did, *ident in conn.execute("SELECT id, cluster, rack, node, device FROM devices"):
            self._dids[tuple(ident)], self._idents[did] = did, tuple(ident)  # type: ignore[index]
        for lid, text in conn.execute("SELECT id, metrics FROM layouts"):
            if lid not in self._names:
                self._remember_layout(lid, tuple(text.split(",")))

    # -- writes
    def _rows(self, frames: Sequence[Frame]) -> tuple[list[Row], int]:
        rows: list[Row] = []
        add = rows.append
        points = 0
        dids, layouts = self._dids, self._layouts
        for f in frames:
            ts = int(round(f.ts * 1000))
            parts: list[tuple[str, Mapping[str, float]]] = [
                (gpu_device(g.index), g.metrics) for g in f.gpus]
            parts.append(("host", f.host.metrics))
            parts.extend((p.name, p.metrics) for p in f.host.ports)
            for device, metrics in parts:
                if not metrics:
                    continue  # a lost GPU: nothing measured, nothing stored
                ident = (f.cluster, f.rack, f.node, device)
                did = dids.get(ident) or self._did(ident)
                names = tuple(metrics)
                lid = layouts.get(names) or self._layout(names)
                add((ts, did, lid, array("d", metrics.values()).tobytes()))
                points += len(names)
        return rows, points

    @guarded("write")
    def write(self, frames: Sequence[Frame]) -> int:
        rows, points = self._rows(frames)
        if not rows:
            return 0
        complete, dirty = _rollup(rows)
        conn = self._conn()
        with conn:
            conn.executemany("INSERT OR REPLACE INTO samples (ts, did, layout, vals) "
                             "VALUES (?, ?, ?, ?)", rows)
            conn.executemany("INSERT OR REPLACE INTO rollup_1m VALUES (?, ?, ?, ?, ?, ?, ?)",
                             complete)
            conn.executemany("INSERT OR IGNORE INTO dirty_minutes VALUES (?)",
                             [(m,) for m in dirty])
        return points

    # -- silences and acknowledgements (small tables, read whole)
    def write_silences(self, silences: Sequence[Silence]) -> None:
        try:
            with self._conn() as conn:
                conn.executemany("INSERT OR REPLACE INTO silences VALUES (?,?,?,?,?,?)", [
                    (s.id, json.dumps([list(m) for m in s.matchers]), s.start_ts, s.end_ts,
                     s.created_by, s.comment) for s in silences])
        except sqlite3.OperationalError as exc:
            raise StoreError(f"sqlite write to {self.path} failed: {exc}") from exc

    def silences(self, active_at: float | None = None) -> list[Silence]:
        sql, args = "SELECT * FROM silences", ()
        if active_at is not None:
            sql, args = sql + " WHERE start_ts <= ? AND end_ts > ?", (active_at, active_at)
        rows = self._conn().execute(sql + " ORDER BY start_ts", args).fetchall()
        return [Silence(i, tuple(tuple(m) for m in json.loads(ms)), a, b, by, c)
                for i, ms, a, b, by, c in rows]

    def write_acks(self, acks: Sequence[Acknowledgement]) -> None:
        try:
            with self._conn() as conn:
                conn.executemany("INSERT OR REPLACE INTO acks VALUES (?,?,?,?)",
                                 [(a.alert_id, a.ts, a.by, a.comment) for a in acks])
        except sqlite3.OperationalError as exc:
            raise StoreError(f"sqlite write to {self.path} failed: {exc}") from exc

    def acks(self) -> list[Acknowledgement]:
        return [Acknowledgement(*r) for r in
                self._conn().execute("SELECT * FROM acks ORDER BY ts").fetchall()]

    # -- reads
    def _devices(self, node: str | None, device: str | None) -> list[int]:
        self._refresh()
        return [did for did, (_, _, n, d) in self._idents.items()
                if (node is None or n == node) and (device is None or d == device)]

    def _key(self, metric: str, did: int) -> SeriesKey:
        return SeriesKey(metric, *self._idents[did])

    @guarded("read")
    def latest(self, metric: str, since_ms: int) -> list[Point]:
        self._refresh()
        newest: dict[int, Point] = {}
        index = self._index
        for ts, did, lid, vals in self._conn().execute(
                "SELECT ts, did, layout, vals FROM samples WHERE ts >= ? ORDER BY ts DESC",
                (since_ms,)):
            if did in newest:
                continue
            i = index[lid].get(metric)
            if i is not None:
                newest[did] = (self._key(metric, did), ts, _value(vals, i))
        return sorted(newest.values(), key=lambda p: (p[0].node, p[0].device))

    @guarded("read")
    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None) -> list[Point]:
        if end_ms - start_ms > RAW_SPAN_MS:
            return [(key, ts, total / n) for key, ts, n, total, _, _ in
                    self.rollups(metric, start_ms, end_ms, node, device)]
        return list(self._raw(metric, start_ms, end_ms, self._devices(node, device)))

    def _raw(self, metric: str, start_ms: int, end_ms: int, dids: list[int]) -> Iterator[Point]:
        if not dids:
            return
        wanted = set(dids)
        index = self._index
        for ts, did, lid, vals in self._conn().execute(
                "SELECT ts, did, layout, vals FROM samples WHERE ts >= ? AND ts < ? ORDER BY ts",
                (start_ms, end_ms)):
            if did in wanted and (i := index[lid].get(metric)) is not None:
                yield self._key(metric, did), ts, _value(vals, i)

    def export(self, start_ms: int = 0, end_ms: int = 1 << 62) -> Iterator[Point]:
        """Every raw point in [start, end), in time order (like VictoriaMetrics' export)."""
        self._refresh()
        for ts, did, lid, vals in self._conn().execute(
                "SELECT ts, did, layout, vals FROM samples WHERE ts >= ? AND ts < ? ORDER BY ts",
                (start_ms, end_ms)):
            for name, value in zip(self._names[lid], array("d", vals)):
                yield self._key(name, did), ts, value

    @guarded("read")
    def count(self) -> int:
        """How many points (one metric of one device at one instant) the store holds."""
        (n,) = self._conn().execute(
            "SELECT coalesce(sum(length(vals)), 0) / 8 FROM samples").fetchone()
        return int(n)

    @guarded("read")
    def rollups(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
                device: str | None = None
                ) -> list[tuple[SeriesKey, int, int, float, float, float]]:
        """(series, minute, count, sum, min, max) of ``metric``, oldest first."""
        dids = self._devices(node, device)
        if not dids:
            return []
        merged: dict[tuple[int, int], list[float]] = {}
        marks = ",".join("?" * len(dids))
        for did, ts, lid, n, sums, mins, maxs in self._conn().execute(
                f"SELECT did, ts, layout, n, sums, mins, maxs FROM rollup_1m "
                f"WHERE did IN ({marks}) AND ts >= ? AND ts < ?", (*dids, start_ms, end_ms)):
            i = self._index[lid].get(metric)
            if i is None:
                continue
            row = (n, _value(sums, i), _value(mins, i), _value(maxs, i))
            have = merged.get((did, ts))
            if have is None:
                merged[(did, ts)] = list(row)
            else:  # the device changed layout within this minute
                have[0] += row[0]
                have[1] += row[1]
                have[2], have[3] = min(have[2], row[2]), max(have[3], row[3])
        return [(self._key(metric, did), ts, int(n), s, lo, hi)
                for (did, ts), (n, s, lo, hi) in sorted(merged.items(), key=lambda x: x[0][1])]

    @guarded("read")
    def minute_means(self, metrics: Sequence[str], start_ms: int, end_ms: int
                     ) -> dict[str, list[tuple[SeriesKey, np.ndarray, np.ndarray]]]:
        """Minute means of several metrics in one pass over the rollups of [start, end):
        per metric, per series, (minute starts in ms, means). For bulk readers (training
        reads a week of a whole fleet): ``rollups`` reads every row once per metric and
        builds a tuple per point. A device that changed layout within a minute has one
        mean per layout there. One range query per device on the (device, minute) key:
        a query on the minute alone scans the whole table (a week of a 1,000-GPU fleet is
        ~10 GB of rollups) for each day a reader asks for."""
        self._refresh()
        wanted = list(metrics)
        out: dict[str, list[tuple[SeriesKey, np.ndarray, np.ndarray]]] = {m: [] for m in wanted}
        conn = self._conn()
        for did in sorted(self._idents):
            rows = conn.execute("SELECT ts, layout, n, sums FROM rollup_1m "
                                "WHERE did = ? AND ts >= ? AND ts < ?",
                                (did, start_ms, end_ms)).fetchall()
            if not rows:
                continue
            ts_all, lids, n_all, blobs = zip(*rows)
            layouts = dict.fromkeys(lids)
            ts_arr = np.array(ts_all, dtype=np.int64)
            n_arr = np.array(n_all, dtype=np.float64)
            lid_arr = np.array(lids) if len(layouts) > 1 else None
            for lid in layouts:  # one series per layout, in order of first sight
                cols = [(m, i) for m in wanted if (i := self._index[lid].get(m)) is not None]
                if not cols:
                    continue
                if lid_arr is None:
                    ts, n, packed = ts_arr, n_arr, b"".join(blobs)
                else:  # the device changed layout (a GPU lost, a metric no longer read)
                    mine = np.flatnonzero(lid_arr == lid)
                    ts, n = ts_arr[mine], n_arr[mine]
                    packed = b"".join([blobs[k] for k in mine.tolist()])
                sums = np.frombuffer(packed, np.float64).reshape(len(ts), -1)
                for m, i in cols:
                    out[m].append((self._key(m, did), ts, sums[:, i] / n))
        return out

    # -- upkeep
    @guarded("upkeep")
    def maintain(self, now_ms: int) -> None:
        conn = self._conn()
        with conn:
            closed = now_ms - ROLLUP_GRACE_MS
            for (minute,) in conn.execute("SELECT minute FROM dirty_minutes WHERE minute < ?",
                                          (closed - MINUTE_MS,)).fetchall():
                rows = conn.execute("SELECT ts, did, layout, vals FROM samples "
                                    "WHERE ts >= ? AND ts < ?",
                                    (minute, minute + MINUTE_MS)).fetchall()
                if rows:
                    complete, _ = _rollup(rows, whole=True)
                    conn.executemany("INSERT OR REPLACE INTO rollup_1m "
                                     "VALUES (?, ?, ?, ?, ?, ?, ?)", complete)
                conn.execute("DELETE FROM dirty_minutes WHERE minute = ?", (minute,))
            conn.execute("DELETE FROM samples WHERE ts < ?", (now_ms - self.raw_retention_ms,))
            conn.execute("DELETE FROM rollup_1m WHERE ts < ?",
                         (now_ms - self.rollup_retention_ms,))
            # Events are few and what a month's report reads: kept as long as rollups.
            conn.execute("DELETE FROM events WHERE ts_ms < ?",
                         (now_ms - self.rollup_retention_ms,))

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _value(packed: bytes, i: int) -> float:
    return struct.unpack_from("<d", packed, 8 * i)[0]


def _rollup(rows: Sequence[Row], whole: bool = False) -> tuple[list[Rollup], set[int]]:
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
