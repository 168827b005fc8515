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

import contextlib
import json
import logging
import os
import sqlite3
import struct
import threading
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import (
    RAW_SPAN_MS,
    Acknowledgement,
    Silence,
    StoreError,
    StoreLost,
    gpu_device,
)
from fleetwatch.pipeline.store.energy_sqlite import SqliteEnergy
from fleetwatch.pipeline.store.sqlite_errors import (
    busy,
    describe,
    held_by_another,
    quick_check,
    read_only_mount,
)
from fleetwatch.pipeline.store.sqlite_notify import NOTIFY_SCHEMA, SqliteNotifications
from fleetwatch.pipeline.store.sqlite_reads import Ident, SqliteReads
from fleetwatch.pipeline.store.sqlite_records import (
    ALERT_TABLE,
    SqliteRecords,
    guarded,
    key_events,
)
from fleetwatch.pipeline.store.sqlite_rollup import Row, rollup, upkeep

__all__ = ["RAW_SPAN_MS", "SqliteStore"]  # RAW_SPAN_MS: callers take it from here too

log = logging.getLogger(__name__)

# How often (at most) a reader's thread checks that its path still names the file it has open.
_FILE_CHECK_S = 1.0

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
-- What retention deleted: a table's rows before this instant are gone (reports say so).
CREATE TABLE IF NOT EXISTS pruned (what TEXT PRIMARY KEY, before_ms INTEGER NOT NULL);
"""


class SqliteStore(SqliteReads, SqliteRecords, SqliteEnergy, SqliteNotifications):
    """Frames, alerts, annotations and events in one SQLite file (reads of frames:
    ``SqliteReads``; alerts, annotations and events: ``SqliteRecords``; the energy ledger:
    ``SqliteEnergy``; what was notified: ``SqliteNotifications``; rollups and upkeep:
    ``sqlite_rollup``). ``busy_timeout_s``: how long a write waits for another writer's
    lock before it fails with ``StoreError`` (the processor retries later)."""

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
            self._create_records(conn)
            conn.executescript(NOTIFY_SCHEMA)
        except sqlite3.OperationalError as exc:
            if not busy(exc):
                raise
            raise StoreError(held_by_another(self.path, self.busy_timeout_s,
                                             "open it")) from exc

    # -- connections: one per thread, since sqlite3 connections are not shareable
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._read_only:
            conn = self._still_the_file(conn)
        if conn is None:
            if self._read_only:
                file_id = self._file_id_now()
                conn = sqlite3.connect(self._reader_uri(), uri=True,
                                       check_same_thread=False, timeout=self.busy_timeout_s)
                self._check_is_store(conn)
                self._adopt(file_id)
                self._local.file_id, self._local.checked = file_id, time.monotonic()
            else:
                conn = sqlite3.connect(self.path, check_same_thread=False,
                                       timeout=self.busy_timeout_s)
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                self._into_wal(conn)
                conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            self._local.conn = conn
        return conn

    def _into_wal(self, conn: sqlite3.Connection) -> None:
        """WAL mode, kept in the file (a no-op for a store fleetwatch made). A new file, or
        one in rollback-journal mode, is switched under an exclusive lock, and SQLite answers
        at once "database is locked" (no busy wait: it would deadlock) when another
        connection holds its write lock or switches it too (two workers opening a new store
        at once): tried again until the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout_s
        said = False
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL").fetchall()
                return
            except sqlite3.OperationalError as exc:
                if not busy(exc) or time.monotonic() >= deadline:
                    raise
            if not said:
                log.debug("switching %s to WAL mode met another connection's lock; "
                          "trying again for up to %g s", self.path, self.busy_timeout_s)
                said = True
            time.sleep(0.01)

    def _check_is_store(self, conn: sqlite3.Connection) -> None:
        """A file without fleetwatch's tables (an empty file, another program's database)
        is refused in words, not met later as 'no such table' in a traceback."""
        try:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                 "name = 'samples'").fetchone()
        except sqlite3.DatabaseError as exc:  # not SQLite, damaged, or cannot be opened
            conn.close()
            raise StoreError(describe(self.path, exc)) from None
        if found is None:
            conn.close()
            empty = " (an empty file)" if os.path.getsize(self.path) == 0 else ""
            raise StoreError(f"{self.path} is not a fleetwatch SQLite store{empty}: it has none of "
                             "its tables; name the store fleetwatch wrote with --store "
                             "(store.path), or remove this file")

    def damage(self, full_below_bytes: int = 256 * 2**20) -> str | None:
        """SQLite's complaint about this file's structure, or None when sound: the whole
        file for a store of up to ``full_below_bytes`` (a 1 GB store takes 1.2-1.6 s),
        else the alert, silence and acknowledgement tables only (what ``alerts`` lists;
        under a millisecond). Never raises: a file that cannot even be checked is damaged."""
        try:
            conn = self._conn()
            if os.path.getsize(self.path) <= full_below_bytes:
                return quick_check(conn)
            have = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
            for table in (t for t in (ALERT_TABLE, "silences", "acks") if t in have):
                found = quick_check(conn, table)
                if found is not None:
                    return found
        except (sqlite3.Error, StoreError, OSError) as exc:
            return str(exc)
        return None

    def _reader_uri(self) -> str:
        """A store on a read-only mount (a snapshot, a backup) without its ``-shm``: SQLite
        cannot create it there, and nobody can change the file, so it is read as immutable
        (unless its ``-wal`` holds writes not merged yet, which that would skip)."""
        uri = f"file:{self.path}?mode=ro"
        wal = Path(self.path + "-wal")
        if read_only_mount(self.path) and not Path(self.path + "-shm").exists() and (
                not wal.exists() or wal.stat().st_size == 0):
            uri += "&immutable=1"
        return uri

    def _file_id_now(self) -> tuple[int, int]:
        """(device, inode) of the file at ``path`` now; ``StoreError`` when there is none."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StoreError(f"no store at {self.path}: run `fleetwatch up` or "
                             "`fleetwatch simulate` first, or point store.path at one") from None
        return st.st_dev, st.st_ino

    def _still_the_file(self, conn: sqlite3.Connection) -> sqlite3.Connection | None:
        """This thread's reader, or None (closed) when ``path`` no longer names the file it
        opened: removed, or replaced by a new store. An open connection keeps reading a
        deleted file, so without this each server thread would serve the store it happened
        to open. While this connection holds the old file, its inode cannot be reused, so a
        new file at the path always has a new (device, inode). The path is looked at once a
        second per thread at most; a thread whose file is older than the one the shared
        caches (device ids, layouts) describe reopens at once."""
        now = time.monotonic()
        if now - self._local.checked < _FILE_CHECK_S and self._local.file_id == self._file_id:
            return conn
        self._local.checked = now
        try:
            current = self._file_id_now()
        except StoreError:
            self.close()
            raise
        if current == self._local.file_id == self._file_id:
            return conn
        self.close()
        return None

    def _check_writer_file(self, every_s: float = _FILE_CHECK_S) -> None:
        """``StoreLost`` once ``path`` no longer names the file this writer opened (moved to
        a bigger disk, renamed, deleted, a copy put in its place): its writes would go on
        into a file nobody reads, or into nothing, while the processor counts them stored.
        The path is looked at once every ``every_s`` at most (a stat: microseconds)."""
        if self.lost is not None:
            raise StoreLost(self.lost)
        if self._read_only or self._file_id is None:
            return
        now = time.monotonic()
        if now - self._checked_at[0] < every_s:
            return
        try:
            st = os.stat(self.path)
            current: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            current = None
        if current == self._file_id:
            self._checked_at = (now, time.time())
            return
        self.lost = lost_said(self.path, current is None, self._checked_at[1])
        raise StoreLost(self.lost)

    def _adopt(self, file_id: tuple[int, int]) -> None:
        """Forget the ids and layouts learnt from another file: they are numbered per file."""
        with self._lock:
            if file_id != self._file_id:
                if self._file_id is not None:
                    for cache in (self._dids, self._node_dids, self._idents, self._layouts,
                                  self._names, self._index):
                        cache.clear()
                    self._energy_ready = False
                self._file_id = file_id

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

    def close(self) -> None:
        """Close this thread's connection; a writer looks once more whether its file is
        still at its path (``lost`` says why not)."""
        with contextlib.suppress(StoreLost):  # said through ``lost``: closing goes on
            self._check_writer_file(every_s=0.0)
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def lost_said(path: str, gone: bool, ok_at: float) -> str:
    """Why a writer stopped when its file left ``path`` (``gone``: nothing is there now, else
    another file is), what became of its writes, and how to move a store."""
    name = os.path.basename(path)
    now = ("no longer exists" if gone else
           "now names another file than the one this process opened")
    since = time.strftime("%H:%M:%S", time.localtime(ok_at))
    return (f"the store {path} was moved, renamed, deleted or replaced while this process "
            f"wrote it ({path} {now}); writing stopped. What was written up to {since} (when "
            "the file was last seen in place) is in the file this process had open; writes "
            "after that went to that file too: kept if it was renamed on the same file system "
            f"(its newest writes may be in {name}-wal, left under the old name: put it beside "
            "the renamed file as NEWNAME-wal before opening it), lost if it was moved to "
            "another file system or deleted. To move a store, stop fleetwatch first and move "
            f"{name}, {name}-wal and {name}-shm together, or copy it while it runs with "
            "`fleetwatch backup DEST`; then name the new place with --store (store.path)")
