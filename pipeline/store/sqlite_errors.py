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
import resource
import sqlite3
from pathlib import Path

# sqlite3's primary result codes (https://www.sqlite.org/rescode.html).
_BUSY, _LOCKED = 5, 6
_READONLY, _IOERR, _CORRUPT, _CANTOPEN, _FULL, _NOTADB = 8, 10, 11, 14, 13, 26
# Extended I/O codes of a write that failed (SQLITE_IOERR_WRITE, _FSYNC, _TRUNCATE): SQLite
# reports a write refused for a file size limit (EFBIG) or a quota (EDQUOT) so, not as FULL.
_WRITE_IOERRS = frozenset({778, 1034, 1546})
# A file system with less free space than this cannot take SQLite's next pages.
NEARLY_FULL_BYTES = 1 << 20


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


def size_limit(path: str) -> int | None:
    """This process's file size limit (``ulimit -f``, systemd ``LimitFSIZE=``) in bytes,
    where the store's file or its WAL or journal has reached it (within a few pages)."""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft == resource.RLIM_INFINITY:
        return None
    for name in (path, f"{path}-wal", f"{path}-journal"):
        try:
            if os.path.getsize(name) + 16 * 4096 >= soft:
                return soft
        except OSError:
            continue
    return None


def nearly_full(path: str) -> bool:
    """Whether the file system holding ``path`` has (almost) no space left."""
    try:
        st = os.statvfs(str(Path(path).parent) or ".")
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NEARLY_FULL_BYTES


def kind(exc: BaseException, path: str | None = None) -> str:
    """``damaged``, ``not-sqlite``, ``read-only``, ``full``, ``limit`` (the file size
    limit), ``write`` (a write failed, the disk not full), ``io`` or ``other``. With
    ``path``, an I/O error of a write is told apart: the file size limit reached, a full
    file system (SQLite says neither as such)."""
    if isinstance(exc, OSError):
        return {errno.EROFS: "read-only", errno.EACCES: "read-only", errno.EPERM: "read-only",
                errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EFBIG: "limit",
                errno.EIO: "io"}.get(exc.errno or 0, "other")
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
        if path is not None and size_limit(path) is not None:
            return "limit"
        if path is not None and nearly_full(path):
            return "full"
        return "write" if code in _WRITE_IOERRS else "io"
    return "other"


def describe(path: str, exc: BaseException) -> str:
    """The error on the store at ``path``, named for what it is, with what to do."""
    what = kind(exc, path)
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
        return (f"the disk holding {path} is full ({detail}; {free_space(path)}): free space "
                "there, or move the store (--store) to a larger file system")
    if what == "limit":
        limit = size_limit(path)
        size = f"{limit / 2**20:.1f} MiB" if limit is not None else "its limit"
        return (f"the store {path} cannot grow: it reached this process's file size limit "
                f"({size}: ulimit -f, systemd LimitFSIZE=) ({detail}): raise the limit, or "
                "move the store (--store); the file itself is sound")
    if what == "write":
        return (f"a write to {path} failed ({detail}; {free_space(path)}): check the free "
                "space and quota of its file system (df, quota), its file size limit "
                "(ulimit -f) and the device (dmesg); the file itself is not known damaged")
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
