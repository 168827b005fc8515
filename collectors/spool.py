"""The agent's on-disk spool: frames wait here while the broker is away.

``Spool`` is a bounded FIFO of messages in segment files. A record is
``[u32 length][u32 crc32][msgpack [topic, key, headers, value]]``; the
``head`` checkpoint names the first record not yet delivered. What survives
what:

* a process restart: segments and checkpoint are files; appends are fsync'ed
  before ``append`` returns, the checkpoint is replaced atomically;
* a crash mid-write: at open the last segment is checked record by record
  and cut at the first torn or corrupt one (``torn`` counts them);
* a crash between delivery and checkpoint: those records are sent again
  (at-least-once; the store's writes are idempotent on series and time).

When ``max_bytes`` would be exceeded the policy is drop-oldest, a whole
segment at a time (a segment is ``max_bytes / 8`` by default), and each
frame dropped is counted.

The agent runs as root, so the spool is never a way into another file: its
directory and every file in it are checked as ``spool_files`` says.

One process per spool: ``Spool`` holds an exclusive ``flock`` on ``lock`` in the
directory (as ``fleetwatch/storelock.py`` does for the store; it holds the pid), and a
second one on the same directory gets ``SpoolBusy`` naming the first one's pid. Two
agents appending to one segment, each deleting it once it had sent "its" records,
lost frames. A segment file that vanishes anyway (an admin's ``rm``) costs its frames,
counted in ``dropped``, never the sender.

``SpoolingProducer`` (in ``spooling.py``) puts it in front of the broker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import msgpack

from fleetwatch.collectors.spool_files import (
    SpoolError,
    check_writable,
    make_private_dir,
    open_file,
)
from fleetwatch.storelock import holder_here, lock_fd, unlock_fd

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")
_MAX_RECORD = 64 << 20
_SUFFIX = ".seg"


class SpoolBusy(SpoolError):
    """Another process holds the spool directory's lock; the message names its pid."""


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    topic: str
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    def pack(self) -> bytes:
        payload = msgpack.packb([self.topic, self.key, [list(h) for h in self.headers],
                                 self.value], use_bin_type=True)
        return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload

    @staticmethod
    def unpack(payload: bytes) -> SpoolRecord:
        topic, key, headers, value = msgpack.unpackb(payload, raw=False)
        return SpoolRecord(topic, value, key, tuple((k, v) for k, v in headers))


@dataclass
class _Segment:
    id: int
    size: int       # bytes on disk
    start: int      # offset of the first undelivered record (non-zero only for the oldest)
    count: int      # undelivered records

    def path(self, root: Path) -> Path:
        return root / f"{self.id:016d}{_SUFFIX}"


class Spool:
    """Bounded on-disk FIFO of ``SpoolRecord``s. Not thread-safe: one owner."""

    def __init__(self, directory: str | Path, max_bytes: int, segment_bytes: int | None = None,
                 fsync: bool = True) -> None:
        self.dir = Path(directory)
        make_private_dir(self.dir)
        check_writable(self.dir)
        self._lock_fd: int | None = self._lock()
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or min(64 << 20, max(max_bytes // 8, 4096))
        self._fsync = fsync
        self.dropped = 0
        self.torn = 0
        self._segments: list[_Segment] = []
        self._writer: BinaryIO | None = None
        self._next_id = 1
        try:
            self._open()
        except BaseException:
            self._unlock()
            raise

    def _lock(self) -> int:
        """The held lock's descriptor; ``SpoolBusy`` if another process holds it."""
        fd = open_file(self.dir / "lock", os.O_RDWR | os.O_CREAT)
        owner = lock_fd(fd)
        if owner is not None:
            who, stop = holder_here(owner)
            raise SpoolBusy(
                f"the spool directory {self.dir} is in use by another fleetwatch agent "
                f"({who}): two agents on one spool lose each other's frames; {stop}, or give "
                "this agent a spool directory of its own (agent.spool_dir, "
                "FLEETWATCH_AGENT_SPOOL_DIR)")
        return fd

    def _unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            unlock_fd(fd)

    # -- state ------------------------------------------------------------------

    def __len__(self) -> int:
        return sum(s.count for s in self._segments)

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def _open(self) -> None:
        ids = sorted(int(p.stem) for p in self.dir.glob(f"*{_SUFFIX}") if p.stem.isdigit())
        head_id, head_off = self._read_checkpoint()
        for sid in ids:
            if sid < head_id:  # delivered; the crash came before the unlink
                (self.dir / f"{sid:016d}{_SUFFIX}").unlink(missing_ok=True)
                continue
            seg = _Segment(sid, 0, head_off if sid == head_id else 0, 0)
            self._scan(seg, last=sid == ids[-1])
            if seg.count:
                self._segments.append(seg)
            else:  # delivered or empty; appends always go to a fresh segment
                seg.path(self.dir).unlink()
        self._next_id = max([head_id, *(i + 1 for i in ids)])

    def _read_checkpoint(self) -> tuple[int, int]:
        try:
            with os.fdopen(open_file(self.dir / "head", os.O_RDONLY), "rb") as f:
                data = json.loads(f.read(1 << 16))
            return int(data["segment"]), int(data["offset"])
        except FileNotFoundError:
            return 0, 0
        except (ValueError, KeyError, TypeError) as exc:
            # Replaying from the oldest segment duplicates, never loses.
            log.warning("spool checkpoint %s unreadable (%s); replaying all", self.dir, exc)
            return 0, 0

    def _scan(self, seg: _Segment, last: bool) -> None:
        """Count the records from ``seg.start``; cut the file at a torn or corrupt record."""
        path = seg.path(self.dir)
        with os.fdopen(open_file(path, os.O_RDWR), "r+b") as f:
            data = f.read()
            seg.start = min(seg.start, len(data))
            pos, count = seg.start, 0
            while pos < len(data):
                end = _record_end(data, pos)
                if end is None:
                    break
                pos, count = end, count + 1
            if pos < len(data):
                self.torn += 1
                level = logging.WARNING if last else logging.ERROR
                log.log(level, "spool segment %s: %d bytes after offset %d are torn or "
                        "corrupt; dropping them", path, len(data) - pos, pos)
                # The file checked above, through its descriptor: never a link's target.
                f.truncate(pos)
                os.fsync(f.fileno())
        seg.size, seg.count = pos, count

    # -- writing ----------------------------------------------------------------

    def append(self, records: Sequence[SpoolRecord]) -> int:
        """Append in order and fsync; return how many old records were dropped to make room.
        ``OSError`` (a full disk, a file size limit): none of ``records`` is kept, and the
        spool is as before, so that it can still be read and replayed."""
        last = self._segments[-1] if self._segments else None
        mark = (last, last.size if last else 0, last.count if last else 0, self._next_id)
        try:
            return self._append(records)
        except OSError:
            self._undo(*mark)
            raise

    def _undo(self, last: _Segment | None, size: int, count: int, next_id: int) -> None:
        """A failed append: its bytes were never all written, so the writer (whose buffer
        holds what cannot be flushed) is closed, the segments it made are removed and the
        one it extended cut back; the next append starts a segment of its own."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()  # closes the file even when the flush fails
        for seg in [s for s in self._segments if s.id >= next_id]:
            self._segments.remove(seg)
            seg.path(self.dir).unlink(missing_ok=True)
        if last is not None and any(s is last for s in self._segments):
            last.size, last.count = size, count
            try:  # through a descriptor opened as every spool file is: never a link's target
                fd = open_file(last.path(self.dir), os.O_WRONLY)
                try:
                    os.ftruncate(fd, size)
                finally:
                    os.close(fd)
            except OSError:
                pass  # left as it is: reads stop at ``size``; a restart cuts the torn tail

    def _append(self, records: Sequence[SpoolRecord]) -> int:
        dropped_before = self.dropped
        for rec in records:
            blob = rec.pack()
            if len(blob) > self.max_bytes:
                log.error("a %d-byte record does not fit a %d-byte spool; dropped",
                          len(blob), self.max_bytes)
                self.dropped += 1
                continue
            while self.bytes + len(blob) > self.max_bytes and self._segments:
                self._drop_oldest()
            seg = self._writable(len(blob))
            self._write(blob)
            seg.size += len(blob)
            seg.count += 1
        self._sync()
        return self.dropped - dropped_before

    def _writable(self, need: int) -> _Segment:
        seg = self._segments[-1] if self._segments else None
        if seg is None or self._writer is None or seg.size + need > self.segment_bytes:
            self._close_writer()
            seg = _Segment(self._next_id, 0, 0, 0)
            self._next_id += 1
            self._segments.append(seg)
            fd = open_file(seg.path(self.dir), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            self._writer = os.fdopen(fd, "ab")  # held open across appends
            self._sync_dir()
        return seg

    def _write(self, blob: bytes) -> None:
        self._writer.write(blob)

    def _sync(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            if self._fsync:
                os.fsync(self._writer.fileno())

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._sync()
            self._writer.close()
            self._writer = None

    def _drop_oldest(self) -> None:
        seg = self._segments[0]
        if len(self._segments) == 1:
            self._close_writer()
        self.dropped += seg.count
        log.warning("spool %s full (%d bytes): dropped %d oldest frames", self.dir,
                    self.max_bytes, seg.count)
        self._segments.pop(0)
        self._checkpoint()
        seg.path(self.dir).unlink(missing_ok=True)

    # -- reading ----------------------------------------------------------------

    def peek(self, n: int) -> list[SpoolRecord]:
        """The ``n`` oldest undelivered records, oldest first, without removing them."""
        out: list[SpoolRecord] = []
        self._sync()
        for seg in list(self._segments):
            if len(out) >= n:
                break
            want = min(seg.count, n - len(out))
            data = self._read(seg)
            if data is None:
                continue
            pos = 0
            for _ in range(want):
                end = _record_end(data, pos)
                if end is None:  # the disk changed under us since open
                    raise OSError(f"spool segment {seg.path(self.dir)} is corrupt at "
                                  f"{seg.start + pos}")
                out.append(SpoolRecord.unpack(data[pos + _HEADER.size:end]))
                pos = end
        return out

    def _read(self, seg: _Segment, delivered: int = 0) -> bytes | None:
        """``seg``'s undelivered bytes; None if its file vanished. Its frames (less the
        ``delivered`` ones) are then lost: counted in ``dropped`` and the segment forgotten,
        so that the spool goes on with the next one instead of failing on every try."""
        try:
            with os.fdopen(open_file(seg.path(self.dir), os.O_RDONLY), "rb") as f:
                f.seek(seg.start)
                return f.read(seg.size - seg.start)
        except FileNotFoundError:
            pass
        lost = seg.count - delivered
        self.dropped += lost
        log.error("spool segment %s vanished (removed by another process?): its %d frames "
                  "are lost; agent.spool_dir must be this agent's alone", seg.path(self.dir),
                  lost)
        if seg is self._segments[-1]:
            self._close_writer()  # its file is gone: appends go to a new segment
        self._segments.remove(seg)
        self._checkpoint()
        return None

    def remove(self, n: int) -> None:
        """Forget the ``n`` oldest records (delivered); checkpoint before unlinking."""
        gone: list[_Segment] = []
        while n > 0 and self._segments:
            seg = self._segments[0]
            if n >= seg.count:
                n -= seg.count
                if seg is self._segments[-1]:
                    self._close_writer()
                gone.append(self._segments.pop(0))
                continue
            data = self._read(seg, delivered=n)
            if data is None:
                break
            pos = 0
            for _ in range(n):
                end = _record_end(data, pos)
                assert end is not None, "checked when the segment was opened"
                pos = end
            seg.start += pos
            seg.count -= n
            n = 0
        self._checkpoint()
        for seg in gone:
            seg.path(self.dir).unlink(missing_ok=True)

    def _checkpoint(self) -> None:
        head = (self._segments[0].id, self._segments[0].start) if self._segments else (
            self._next_id, 0)
        tmp = self.dir / "head.tmp"
        # A new file each time (a leftover, or a link, is removed, never written through);
        # the rename below replaces ``head`` itself, not what a link there points at.
        tmp.unlink(missing_ok=True)
        with os.fdopen(open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as f:
            json.dump({"segment": head[0], "offset": head[1]}, f)
            f.flush()
            if self._fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.dir / "head")
        self._sync_dir()

    def _sync_dir(self) -> None:
        if self._fsync:
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        try:
            self._close_writer()
        finally:
            self._unlock()


def _record_end(data: bytes, pos: int) -> int | None:
    """End offset of the record at ``pos``, or None if it is torn or corrupt."""
    if pos + _HEADER.size > len(data):
        return None
    length, crc = _HEADER.unpack_from(data, pos)
    end = pos + _HEADER.size + length
    # Zero length never occurs (msgpack of a 4-array) but is what a zero-filled
    # tail after a crash looks like, and its crc32 would match.
    if length == 0 or length > _MAX_RECORD or end > len(data):
        return None
    if zlib.crc32(data[pos + _HEADER.size:end]) != crc:
        return None
    return end
