"""The agent's spool is never a way into another file (``collectors.spool``).

The agent runs as root: the spool directory must be its user's and writable by no one
else, and every file in it is opened without following a link (``O_NOFOLLOW``) and
refused unless it is a regular file of that user's (``SpoolError``, naming the path and
what to do). A link is never truncated, appended to or read through.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

# Where the agent unit keeps its spool (deploy/systemd/fleetwatch-agent.service).
_AGENT_STATE = "/var/lib/fleetwatch-agent"


class SpoolError(OSError):
    """The spool directory, or a file in it, is one this process must not use: another
    user's, writable by group or others, or a link. The message says what to do."""


def make_private_dir(directory: Path) -> None:
    """Make ``directory`` and each missing parent 0700, whatever the umask: the spool is its
    user's alone (a DaemonSet's hostPath, an agent run by hand with umask 022). A directory
    that exists is left as it is, for ``check_private`` to judge."""
    missing: list[Path] = []
    d = Path(directory)
    while not d.is_dir() and d != d.parent:
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            if not d.is_dir():  # a file, or a link to nowhere, where a directory must be
                raise
            continue  # made meanwhile by another: not ours to change
        os.chmod(d, 0o700)  # the umask may have taken bits of the owner's (0o277)


def check_writable(directory: Path) -> None:
    """Raise ``OSError`` now if frames could not be written here later, and
    ``SpoolError`` if the directory is not this user's alone.

    ``os.access`` answers for the real uid and ignores read-only mounts; writing a
    file is the only test that says what an append will meet.
    """
    check_private(directory)
    probe = directory / f".probe-{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):
            probe.unlink()
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(b"x")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write a file in {directory} "
                      f"({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def check_private(directory: Path) -> None:
    """``SpoolError`` unless ``directory`` is this process's user's and writable by no one
    else: whoever can write it can plant a link named as a segment. (The configured path
    itself may be a link an admin made; what it points at is judged.)"""
    if os.name != "posix":
        return
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        return  # the write probe says so
    problem = unsafe_owner_or_mode(st, os.geteuid(), "spool directory", directory)
    if problem:
        raise SpoolError(problem)


def unsafe_owner_or_mode(st: os.stat_result, uid: int, what: str,
                         path: str | Path) -> str | None:
    """What is wrong with a spool directory or file of this ``stat`` for a process of user
    ``uid``, or None."""
    if st.st_uid != uid:
        return (f"the {what} {path} is owned by uid {st.st_uid}, not by this process's user "
                f"(uid {uid}): that user could plant a link that the agent would follow; "
                f"chown it to uid {uid}, or point agent.spool_dir at a directory of this "
                f"user's (the agent unit's is {_AGENT_STATE})")
    if st.st_mode & 0o022:
        return (f"the {what} {path} is writable by group or others (mode "
                f"{stat.S_IMODE(st.st_mode):o}): anyone who can write it can plant a link "
                f"that the agent would follow; chmod go-w {path}")
    return None


def open_file(path: Path, flags: int) -> int:
    """A descriptor on the spool file ``path``, never through a link (``O_NOFOLLOW``) and
    only if it is a regular file of this user's that no one else can write: ``SpoolError``
    otherwise. New files are 0600. ``O_NONBLOCK``: a planted FIFO cannot hang the open."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SpoolError(
                f"the spool file {path} is a symbolic link: the spool never reads or writes "
                "through one (it could point at any file); remove it") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            problem: str | None = f"the spool file {path} is not a regular file; remove it"
        elif os.name == "posix":
            problem = unsafe_owner_or_mode(st, os.geteuid(), "spool file", path)
        else:
            problem = None
    except BaseException:
        os.close(fd)
        raise
    if problem:
        os.close(fd)
        raise SpoolError(problem)
    return fd
