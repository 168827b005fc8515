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
import time
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import (
    RAW_SPAN_MS,
    Acknowledgement,
    Silence,
    StoreError,
    gpu_device,
)
from fleetwatch.pipeline.store.energy_sqlite import SqliteEnergy
from fleetwatch.pipeline.store.sqlite_errors import busy, held_by_another
from fleetwatch.pipeline.store.sqlite_file import SqliteFile
from fleetwatch.pipeline.store.sqlite_notify import NOTIFY_SCHEMA, SqliteNotifications
from fleetwatch.pipeline.store.sqlite_reads import Ident, SqliteReads
from fleetwatch.pipeline.store.sqlite_records import SqliteRecords, guarded, key_events
from fleetwatch.pipeline.store.sqlite_rollup import Row, rollup, upkeep

__all__ = ["RAW_SPAN_MS", "SqliteStore"]  # RAW_SPAN_MS: callers take it from here too

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
    created_by TEXT NOT NULL, comment TEXT NOT NULL, created_ts REAL NOT NULL DEFAULT 0,
    expired_ts REAL NOT NULL DEFAULT 0, planned_end_ts REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS acks (
    alert_id TEXT PRIMARY KEY, ts REAL NOT NULL, by TEXT NOT NULL, comment TEXT NOT NULL);
-- What retention deleted: a table's rows before this instant are gone (reports say so).
CREATE TABLE IF NOT EXISTS pruned (what TEXT PRIMARY KEY, before_ms INTEGER NOT NULL);
"""

SILENCE_COLUMNS = ("id, matchers, start_ts, end_ts, created_by, comment, created_ts, "
                   "expired_ts, planned_end_ts")
# Added since the silences table was first made: when one was made, when it was expired,
# the end it was made with (where expiring it moved its end).
_SILENCE_TIMES = ("created_ts", "expired_ts", "planned_end_ts")


def _add_silence_columns(conn: sqlite3.Connection) -> None:
    have = {row[1] for row in conn.execute("PRAGMA table_info(silences)")}
    for name in _SILENCE_TIMES:
        if name not in have:
            conn.execute(f"ALTER TABLE silences ADD COLUMN {name} REAL NOT NULL DEFAULT 0")


def _silence_select(conn: sqlite3.Connection) -> str:
    """The columns to read: 0 for a time an older file opened read-only lacks."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(silences)")}
    return ", ".join(n if n in have or n not in _SILENCE_TIMES else f"0 AS {n}"
                     for n in SILENCE_COLUMNS.split(", "))


class SqliteStore(SqliteFile, SqliteReads, SqliteRecords, SqliteEnergy,
                  SqliteNotifications):
    """Frames, alerts, annotations and events in one SQLite file (its connections and
    identity: ``SqliteFile``; reads of frames: ``SqliteReads``; alerts, annotations and
    events: ``SqliteRecords``; the energy ledger: ``SqliteEnergy``; what was notified:
    ``SqliteNotifications``; rollups and upkeep: ``sqlite_rollup``). ``busy_timeout_s``:
    how long a write waits for another writer's lock before it fails with ``StoreError``
    (the processor retries later)."""

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
        # (cluster, rack, node) -> GPU index or device name -> id: what a write looks up
        self._node_dids: dict[tuple[str, str, str], dict[int | str, int]] = {}
        self._packers: dict[int, Callable[..., bytes]] = {}
        self._idents: dict[int, Ident] = {}
        self._layouts: dict[tuple[str, ...], int] = {}
        self._names: dict[int, tuple[str, ...]] = {}
        self._index: dict[int, dict[str, int]] = {}
        self._file_id: tuple[int, int] | None = None  # (device, inode) the caches describe
        self._checked_at = (0.0, 0.0)  # the writer's last file check: (monotonic, wall)
        self.lost: str | None = None  # why the writer stopped: its file left its path
        if not read_only:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._open()
            self._file_id = self._file_id_now()
            self._checked_at = (time.monotonic(), time.time())

    @guarded("schema setup")
    def _open(self) -> None:
        try:
            conn = self._conn()
            # First, before any write of the setup: an opener meeting another process
            # converting an earlier version's events table waits for it there (as long as a
            # conversion may take, and says so), not in a CREATE below (the busy timeout).
            key_events(conn, self.path)
            conn.executescript(_SCHEMA)
            _add_silence_columns(conn)
            self._create_records(conn)
            conn.executescript(NOTIFY_SCHEMA)
        except sqlite3.OperationalError as exc:
            if not busy(exc):
                raise
            raise StoreError(held_by_another(self.path, self.busy_timeout_s,
                                             "open it")) from exc


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
        """Learn devices and layouts another process (the writer) created. The ids a read
        needs (``_idents``) only: a write looks its own up (``_did``), so that the ids of
        nodes forgotten (``retire``) are not all cached again by a read of history."""
        conn = self._conn()
        for did, *ident in conn.execute("SELECT id, cluster, rack, node, device FROM devices"):
            self._idents[did] = tuple(ident)  # type: ignore[assignment]
        for lid, text in conn.execute("SELECT id, metrics FROM layouts"):
            if lid not in self._names:
                self._remember_layout(lid, tuple(text.split(",")))

    def retire(self, nodes: Iterable[str]) -> None:
        """Forget the cached device ids of the nodes named ``nodes`` (in every cluster),
        forgotten for good (``Processor.retire``): under churn these caches held every node
        name ever seen. Their rows stay in the table; a node that comes back finds its ids
        there again (``_did``), and a read of history learns them anew (``_refresh``). The
        caches are replaced, not changed in place: a reader may be iterating them."""
        gone = set(nodes)
        if not gone:
            return
        with self._lock:
            self._dids = {k: v for k, v in self._dids.items() if k[2] not in gone}
            self._node_dids = {k: v for k, v in self._node_dids.items() if k[2] not in gone}
            self._idents = {k: v for k, v in self._idents.items() if v[2] not in gone}

    # -- writes
    def _rows(self, frames: Sequence[Frame]) -> tuple[list[Row], int]:
        rows: list[Row] = []
        add = rows.append
        points = 0
        layouts, packers, by_node = self._layouts, self._packers, self._node_dids
        for f in frames:
            ts = int(round(f.ts * 1000))
            node = (f.cluster, f.rack, f.node)
            ids = by_node.get(node)
            if ids is None:
                ids = by_node[node] = {}
            # GPUs by index (no device name to format per GPU), the host and ports by name
            parts: list[tuple[int | str, Mapping[str, float]]] = [
                (g.index, g.metrics) for g in f.gpus]
            parts.append(("host", f.host.metrics))
            parts.extend((p.name, p.metrics) for p in f.host.ports)
            for device, metrics in parts:
                if not metrics:
                    continue  # a lost GPU: nothing measured, nothing stored
                did = ids.get(device)
                if did is None:
                    name = gpu_device(device) if isinstance(device, int) else device
                    did = ids[device] = self._did((*node, name))
                names = tuple(metrics)
                lid = layouts.get(names) or self._layout(names)
                n = len(names)
                pack = packers.get(n) or self._packer(n)
                try:
                    packed = pack(*metrics.values())
                except struct.error:  # not a number: array's error (TypeError, OverflowError)
                    packed = array("d", metrics.values()).tobytes()
                add((ts, did, lid, packed))
                points += n
        return rows, points

    def _packer(self, n: int) -> Callable[..., bytes]:
        """Packs ``n`` floats as ``array("d", ...).tobytes()`` does (native doubles), in a
        third of its time."""
        pack = self._packers[n] = struct.Struct(f"@{n}d").pack
        return pack

    @guarded("write")
    def write(self, frames: Sequence[Frame]) -> int:
        self._check_writer_file()
        rows, points = self._rows(frames)
        if not rows:
            return 0
        complete, dirty = rollup(rows)
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
                conn.executemany(f"INSERT OR REPLACE INTO silences ({SILENCE_COLUMNS}) "
                                 "VALUES (?,?,?,?,?,?,?,?,?)", [
                    (s.id, json.dumps([list(m) for m in s.matchers]), s.start_ts, s.end_ts,
                     s.created_by, s.comment, s.created_ts, s.expired_ts, s.planned_end_ts)
                    for s in silences])
        except sqlite3.OperationalError as exc:
            raise StoreError(f"sqlite write to {self.path} failed: {exc}") from exc

    def silences(self, active_at: float | None = None) -> list[Silence]:
        conn = self._conn()
        sql, args = f"SELECT {_silence_select(conn)} FROM silences", ()
        if active_at is not None:
            sql, args = sql + " WHERE start_ts <= ? AND end_ts > ?", (active_at, active_at)
        rows = conn.execute(sql + " ORDER BY start_ts", args).fetchall()
        return [Silence(i, tuple(tuple(m) for m in json.loads(ms)), a, b, by, c, made, gone,
                        planned) for i, ms, a, b, by, c, made, gone, planned in rows]

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

    def events_pruned_before(self) -> float | None:
        """The instant before which retention deleted events (epoch s), None if it never did
        (or the file predates this record)."""
        try:
            row = self._conn().execute(
                "SELECT before_ms FROM pruned WHERE what = 'events'").fetchone()
        except sqlite3.OperationalError:  # a store written before the table existed
            return None
        return None if row is None else row[0] / 1000

    # -- upkeep
    @guarded("upkeep")
    def maintain(self, now_ms: int) -> None:
        """Rollups and retention; the raw rows past retention go about 2 s' worth a call
        (``sqlite_rollup.upkeep``): what is left goes at the next. ``StoreLost`` when the
        file is no longer at its path."""
        self._check_writer_file(every_s=0.0)
        upkeep(self._conn(), now_ms, self.raw_retention_ms, self.rollup_retention_ms)

