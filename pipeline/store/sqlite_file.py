"""The SQLite store's file: a connection per thread (WAL for the writer, read-only for a
reader), a file that is no fleetwatch store refused in words, and the file's identity
watched, so that a store moved, removed or replaced under a running process is not read
or written as if it were still there (``lost_said``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

from fleetwatch.pipeline.store.base import StoreError, StoreLost
from fleetwatch.pipeline.store.sqlite_errors import busy, describe, quick_check, read_only_mount
from fleetwatch.pipeline.store.sqlite_reads import Ident
from fleetwatch.pipeline.store.sqlite_records import ALERT_TABLE

# The store's own logger, whose lines these are.
log = logging.getLogger("fleetwatch.pipeline.store.sqlite")

# How often (at most) a reader's thread checks that its path still names the file it has open.
_FILE_CHECK_S = 1.0


class SqliteFile:
    """Connections to the store's file and its identity, for ``SqliteStore``: ``_conn``
    gives this thread's connection; a reader reopens when its path names another file
    (``_still_the_file``), a writer stops with ``StoreLost`` (``_check_writer_file``)."""

    path: str
    busy_timeout_s: float
    lost: str | None
    _read_only: bool
    _local: threading.local
    _lock: threading.Lock
    _file_id: tuple[int, int] | None  # (device, inode) the caches describe
    _checked_at: tuple[float, float]  # the writer's last file check: (monotonic, wall)
    # What is numbered per file (cleared by ``_adopt``), held by SqliteStore.
    _dids: dict[Ident, int]
    _node_dids: dict[tuple[str, str, str], dict[int | str, int]]
    _idents: dict[int, Ident]
    _layouts: dict[tuple[str, ...], int]
    _names: dict[int, tuple[str, ...]]
    _index: dict[int, dict[str, int]]
    _energy_ready: bool

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
