"""What an SQLite or file-system error on the embedded store means, in words.

One classifier for every command that opens the store (``up``, ``up --keep``,
``alerts``, ``silence``, the dashboard, ``report``): a read-only directory, a
full disk and a damaged file are each named for what they are, with what to
do, and never sent looking for "another store". Pure: it looks at the error and,
for a read-only or full file system, at the path's directory.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

# sqlite3's primary result codes (https://www.sqlite.org/rescode.html).
_BUSY, _LOCKED = 5, 6
_READONLY, _IOERR, _CORRUPT, _CANTOPEN, _FULL, _NOTADB = 8, 10, 11, 14, 13, 26


def recovery(path: str) -> str:
    """How to get the data of a damaged store back, or go on without it."""
    return (f"keep a copy of it (cp {path}* SOMEWHERE/), then recover what it holds with "
            f"`sqlite3 {path} .recover | sqlite3 RECOVERED.db`, or start a new store "
            "(--store NEW.db)")


def read_only_mount(path: str) -> bool:
    """Whether the file system holding ``path`` is mounted read-only: nobody can change
    the file there, so it may be read as an immutable snapshot."""
    try:
        return bool(os.statvfs(str(Path(path).parent) or ".").f_flag & os.ST_RDONLY)
    except OSError:
        return False


def read_only_dir(path: str) -> bool:
    """Whether the store's directory cannot be written (a read-only mount, or no write
    permission): SQLite then cannot create the WAL's ``-shm`` and ``-wal`` files."""
    parent = str(Path(path).parent) or "."
    return read_only_mount(path) or (os.path.isdir(parent) and not os.access(parent, os.W_OK))


def free_space(path: str) -> str:
    """The free space of the file system holding ``path``, as a user reads it."""
    try:
        st = os.statvfs(str(Path(path).parent) or ".")
    except OSError:
        return "free space unknown"
    mib = st.f_bavail * st.f_frsize / 2**20
    return f"{mib:.1f} MiB free"


def busy(exc: BaseException) -> bool:
    """Whether SQLite gave up on another connection's lock ("database is locked"): an
    error that passes once that lock is let go."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in (_BUSY, _LOCKED)
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def held_by_another(path: str, waited_s: float, doing: str) -> str:
    """A lock on the store at ``path`` another process held for all ``waited_s`` this one
    waited (to do ``doing``), and how to find that process."""
    return (f"the store {path} stayed locked by another process for {waited_s:g} s while "
            f"this one waited to {doing}: that process is stuck or holds a write open. "
            f"`fuser -v {path}` lists the processes that have it open: stop the one holding "
            "it (an older fleetwatch, an sqlite3 shell with a transaction open), then start "
            "this one again")


def kind(exc: BaseException) -> str:
    """``damaged``, ``not-sqlite``, ``read-only``, ``full``, ``io`` or ``other``."""
    if isinstance(exc, OSError):
        return {errno.EROFS: "read-only", errno.EACCES: "read-only", errno.EPERM: "read-only",
                errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EIO: "io"}.get(
                    exc.errno or 0, "other")
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    if primary == _CORRUPT or "malformed" in text:
        return "damaged"
    if primary == _NOTADB or "file is not a database" in text:
        return "not-sqlite"
    if primary == _FULL or "disk is full" in text:
        return "full"
    if primary == _READONLY or "readonly" in text:
        return "read-only"
    if primary == _CANTOPEN or "unable to open" in text:
        return "cantopen"
    if primary == _IOERR or "disk I/O error" in text:
        return "io"
    return "other"


def describe(path: str, exc: BaseException) -> str:
    """The error on the store at ``path``, named for what it is, with what to do."""
    what = kind(exc)
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if what == "cantopen":
        what = "read-only" if read_only_dir(path) else "other"
    if what == "damaged":
        return (f"the store {path} is damaged ({detail}; SQLite cannot read all of it): "
                f"{recovery(path)}")
    if what == "not-sqlite":
        return (f"{path} is not a fleetwatch SQLite store ({detail}): name the store "
                "fleetwatch wrote with --store (store.path); if this was one, it is damaged: "
                f"{recovery(path)}")
    if what == "read-only":
        return (f"the store's directory {Path(path).parent} is read-only ({detail}; SQLite "
                f"needs to create {Path(path).name}-shm and -wal beside it): copy the store to "
                "a writable directory and name the copy with --store, or remount it "
                "read-write")
    if what == "full":
        return (f"no space left on the device holding {path} ({detail}; {free_space(path)}): "
                "free space there, or move the store (--store) to a larger file system")
    if what == "io":
        return (f"the disk holding {path} fails to read or write ({detail}): check the "
                f"device (dmesg), then {recovery(path)}")
    return detail


def quick_check(conn: sqlite3.Connection, table: str | None = None) -> str | None:
    """SQLite's own verdict on the file's structure (``PRAGMA quick_check``, which reads
    every page once; of ``table`` and its indexes only, if named): None when sound, else
    its first complaint."""
    try:
        rows = conn.execute(f"PRAGMA quick_check({table or 1})").fetchall()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    verdict = str(rows[0][0]) if rows else "ok"
    # Its first line is a heading ("*** in database main ***"): one line, for a log.
    return None if verdict == "ok" else " ".join(verdict.replace("*** in database main ***",
                                                                 "").split())
