"""One writer per embedded store: an advisory lock beside the store file.

``fleetwatch up`` and ``fleetwatch simulate`` take it before they read, write
or create anything of the store, so a second instance on the same file stops
with a message naming the first one's pid instead of writing a second
timeline into it. ``flock`` locks belong to the open file: the kernel drops
them when the process ends, however it ends, so a crashed run never leaves
the store locked. The lock file itself stays (removing it would race with a
second instance that has just opened it); it holds the owner's pid, hostname and PID
namespace as text, so that a message names a pid only where it can be killed.
The agent's spool directory is locked the same way (``lock_fd``, in
``collectors/spool.py``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import tempfile
from pathlib import Path


class StoreBusy(RuntimeError):
    """Another process holds the store's lock; the message names its pid."""


class StorePathError(ValueError):
    """The store path cannot be used (its folder is missing, it is a folder...)."""


def lock_path(store_path: str | Path) -> Path:
    return Path(str(store_path) + ".lock")


def check_store_path(store_path: str | Path, setting: str = "--store") -> Path:
    """The store path, refused when its folder is missing or cannot be written: never
    create folders silently, and never end in a traceback.

    A typo in ``--store /var/lib/fleetwach/x.db`` (run as root) would otherwise
    make a new tree somewhere nobody looks. The default store is relative: started
    where its user cannot write (``/`` in a container with a ``USER`` and no
    ``WORKDIR``, a read-only mount), the lock file and SQLite's journal cannot be made.
    ``setting`` is what the user changes to choose another path.
    """
    path = Path(store_path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise StorePathError(f"store {path}: the folder {parent} does not exist; create it "
                             f"first (mkdir -p), or choose another path with {setting}")
    if path.is_dir():
        raise StorePathError(f"store {path} is a folder; name a file, e.g. {path / 'fleet.db'}")
    try:
        # Writing a file is the only test that sees read-only mounts and /proc alike.
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise StorePathError(
                f"store {path}: the folder {parent.absolute()} is on a read-only file system; "
                "the store, its lock and SQLite's journal are written there: copy the store to "
                f"a writable folder and give {setting} the copy, or remount it read-write"
            ) from None
        raise StorePathError(
            f"store {path}: cannot write in the folder {parent.absolute()} "
            f"({_why_unwritable(exc)}); the store, its lock and SQLite's journal go there: "
            f"run from a folder this user can write, or give {setting} a path in one"
        ) from None
    return path


def _why_unwritable(exc: OSError) -> str:
    """Why no file could be made in an existing folder, in words: a kernel's virtual file
    system (/proc, /sys) answers "No such file or directory", which reads as a typo."""
    if exc.errno == errno.ENOENT:
        return ("no file can be created there: a virtual file system such as /proc or /sys, "
                "not a disk")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "this user may not create files there"
    return exc.strerror or str(exc)


def pid_namespace() -> str:
    """This process's PID namespace ("pid:[4026531836]"), "" where it cannot be read."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def holder(text: str, host: str, namespace: str) -> tuple[str, str]:
    """Who holds a lock, from its file's text ("PID HOST NAMESPACE"; an older release wrote
    the pid alone), and how to stop it, seen from ``host`` and ``namespace``. A pid is only
    worth killing in the reader's own PID namespace: a container's agent is pid 1 there, and
    ``kill 1`` on the host would signal init."""
    pid, their_host, their_ns = ([*text.split(), "", "", ""])[:3]
    if not pid.isdigit():
        return "pid unknown", "stop it first"
    if their_host and their_ns and their_host == host and their_ns == namespace:
        return f"pid {pid}", f"stop it first (Ctrl-C, or kill {pid})"
    where = f" on host {their_host}" if their_host else ""
    if their_ns and their_ns != namespace or their_host and their_host != host:
        return (f"pid {pid} in its own PID namespace{where}: a container, or another "
                "machine sharing this folder", "stop it first (its container or service), "
                "not by that pid here")
    return f"pid {pid}{where}", "stop it first (its service, or kill the pid if it is this " \
        "machine's and this PID namespace's)"


def lock_fd(fd: int) -> str | None:
    """Take the exclusive ``flock`` on the open lock file ``fd`` and write who holds it:
    "PID HOSTNAME PID-NAMESPACE" (``holder`` reads it back).

    Returns None once held (``fd`` then belongs to the lock: closing it releases), or,
    when another process holds it, the file's text ("" if empty), having closed ``fd``.
    Shared by the store lock and the agent's spool lock.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.read(fd, 256).decode("ascii", "replace").strip()
        os.close(fd)
        return owner
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {socket.gethostname()} {pid_namespace()}\n".encode())
    return None


def holder_here(text: str) -> tuple[str, str]:
    """``holder`` seen from this process."""
    return holder(text, socket.gethostname(), pid_namespace())


def unlock_fd(fd: int) -> None:
    """Release a lock ``lock_fd`` took: no pid left behind for a process that is gone."""
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing drops the flock


class StoreLock:
    """``with StoreLock(path):`` or ``acquire()`` / ``release()``; not re-entrant."""

    def __init__(self, store_path: str | Path) -> None:
        self.store_path = Path(store_path)
        self.path = lock_path(store_path)
        self._fd: int | None = None

    def acquire(self) -> StoreLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        owner = lock_fd(fd)
        if owner is not None:
            who, stop = holder_here(owner)
            raise StoreBusy(
                f"the store {self.store_path} is in use by another fleetwatch ({who}): "
                f"{stop}, or use another store with --store PATH")
        self._fd = fd
        return self

    def release(self) -> None:
        """Unlock; the lock file stays, emptied. Removing it is not safe with ``flock``: a
        second instance that opened the file just before the unlink would lock a file no
        longer in the folder, and a third would make a new one and lock that too: two
        writers on one store. An empty ``.lock`` beside the store is the price."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        unlock_fd(fd)

    def __enter__(self) -> StoreLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
