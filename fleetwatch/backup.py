"""``fleetwatch backup DEST``: a whole, consistent copy of the SQLite store, while it is
written.

``cp`` of a live store copies the main file only: every write since the last WAL
checkpoint (minutes of samples, alerts, a silence just added) is in ``STORE-wal`` and
missing from the copy, which still passes ``integrity_check``. This copies through
SQLite's online backup API from one read transaction (a snapshot: the writer goes on,
and the copy is the store as it was when the backup began), a few thousand pages a step
so that a big store shows its progress. The copy is written beside DEST and renamed to
it once whole: a failed backup never leaves a partial file named DEST.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetwatch.pipeline.store.sqlite_errors import describe

# Pages copied per step (4 KiB pages: 16 MiB), between two progress reports.
STEP_PAGES = 4096

# (pages copied, pages in all): called after each step.
Progress = Callable[[int, int], None]


class BackupError(RuntimeError):
    """The backup cannot be made as asked; the message says what to do."""


@dataclass(frozen=True)
class BackupResult:
    dest: str
    bytes: int
    seconds: float
    as_of: float  # when the snapshot was taken (epoch s)


def check_paths(store: str, dest: str) -> None:
    """``BackupError`` for a store that is not there or a DEST that would be overwritten."""
    if not Path(store).is_file():
        raise BackupError(f"no store at {store}: name it with --store (store.path)")
    for path in (dest, dest + "-wal"):
        if os.path.lexists(path):
            raise BackupError(f"{path} already exists: fleetwatch backup never overwrites a "
                              "file; remove it yourself or choose another DEST")
    parent = Path(dest).parent
    if not parent.is_dir():
        raise BackupError(f"the folder {parent} of {dest} does not exist: create it first")
    if Path(dest).resolve() == Path(store).resolve():
        raise BackupError(f"{dest} is the store itself: choose another DEST")


def backup(store: str, dest: str, progress: Progress | None = None,
           step_pages: int = STEP_PAGES, compact: bool = False) -> BackupResult:
    """Copy the store at ``store`` to ``dest`` (which must not exist) as it is at the
    start; safe while a processor writes it. ``compact``: without the free pages that
    retention left inside the file (SQLite's ``VACUUM INTO``: smaller, no progress on the
    way). Raises ``BackupError``."""
    check_paths(store, dest)
    partial = f"{dest}.partial-{os.getpid()}"
    t0 = time.monotonic()
    source = _open_source(store)
    try:
        if source.execute("SELECT 1 FROM sqlite_master WHERE name = 'samples'").fetchone() \
                is None:
            raise BackupError(f"{store} is not a fleetwatch SQLite store: name the store "
                              "fleetwatch wrote with --store (store.path)")
        as_of = time.time()
        if compact:  # one statement, one read transaction: a snapshot too
            source.execute("VACUUM INTO ?", (partial,))
        else:
            _copy_pages(source, partial, progress, step_pages)
        os.rename(partial, dest)
    except sqlite3.Error as exc:
        raise BackupError(f"backup of {store} to {dest} failed: {describe(dest, exc)}") from exc
    except OSError as exc:
        raise BackupError(f"backup of {store} to {dest} failed: {describe(dest, exc)}") from exc
    finally:
        source.close()
        for leftover in (partial, partial + "-journal"):
            if os.path.exists(leftover):
                os.unlink(leftover)
    return BackupResult(dest, os.path.getsize(dest), time.monotonic() - t0, as_of)


def _copy_pages(source: sqlite3.Connection, partial: str, progress: Progress | None,
                step_pages: int) -> None:
    """Every page of ``source`` into a new file ``partial``, a step at a time."""
    # One read transaction for the whole copy: every step reads the same snapshot, so the
    # writer's commits neither restart the copy nor tear it.
    source.execute("BEGIN")
    source.execute("SELECT 1 FROM sqlite_master").fetchall()  # the snapshot starts here
    target = sqlite3.connect(partial)
    try:
        source.backup(target, pages=step_pages,
                      progress=(lambda _s, left, total: progress(total - left, total))
                      if progress is not None else None)
        # One self-contained file (the store's WAL mode would come along): reading the
        # copy creates no -wal or -shm beside it; a writer that opens it turns WAL on.
        target.execute("PRAGMA journal_mode=DELETE")
    finally:
        target.close()
        source.rollback()


def _open_source(store: str) -> sqlite3.Connection:
    """The store, read only (``isolation_level=None``: the transaction is ours to open)."""
    try:
        return sqlite3.connect(f"file:{store}?mode=ro", uri=True, isolation_level=None,
                               timeout=30.0)
    except sqlite3.Error as exc:
        raise BackupError(f"cannot open {store}: {describe(store, exc)}") from exc


def said(store: str, result: BackupResult) -> str:
    """What ``fleetwatch backup`` prints when done: size, time, and how to restore."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(result.as_of))
    return (f"backed up {store} to {result.dest}: {result.bytes / 1e6:,.1f} MB in "
            f"{result.seconds:.1f} s, the store as it was at {when}. To restore: stop every "
            f"fleetwatch that writes {store}, remove {store}-wal and {store}-shm, then copy "
            f"{result.dest} to {store}")
