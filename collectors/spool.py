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

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")
_MAX_RECORD = 64 << 20
_SUFFIX = ".seg"


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
        self.dir.mkdir(parents=True, exist_ok=True)
        check_writable(self.dir)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or min(64 << 20, max(max_bytes // 8, 4096))
        self._fsync = fsync
        self.dropped = 0
        self.torn = 0
        self._segments: list[_Segment] = []
        self._writer: BinaryIO | None = None
        self._next_id = 1
        self._open()

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
            data = json.loads((self.dir / "head").read_text())
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
        data = path.read_bytes()
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
            log.log(level, "spool segment %s: %d bytes after offset %d are torn or corrupt; "
                    "dropping them", path, len(data) - pos, pos)
            with open(path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())
        seg.size, seg.count = pos, count

    # -- writing ----------------------------------------------------------------

    def append(self, records: Sequence[SpoolRecord]) -> int:
        """Append in order and fsync; return how many old records were dropped to make room."""
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
            self._writer = open(seg.path(self.dir), "ab")  # noqa: SIM115 (held open across appends)
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
            with open(seg.path(self.dir), "rb") as f:
                f.seek(seg.start)
                data = f.read(seg.size - seg.start)
            pos = 0
            for _ in range(want):
                end = _record_end(data, pos)
                if end is None:  # the disk changed under us since open
                    raise OSError(f"spool segment {seg.path(self.dir)} is corrupt at "
                                  f"{seg.start + pos}")
                out.append(SpoolRecord.unpack(data[pos + _HEADER.size:end]))
                pos = end
        return out

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
            with open(seg.path(self.dir), "rb") as f:
                f.seek(seg.start)
                data = f.read(seg.size - seg.start)
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
        with open(tmp, "w") as f:
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
        self._close_writer()


def check_writable(directory: Path) -> None:
    """Raise ``OSError`` now if frames could not be written here later.

    ``os.access`` answers for the real uid and ignores read-only mounts; writing a
    file is the only test that says what an append will meet.
    """
    probe = directory / f".probe-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"x")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write a file in {directory} "
                      f"({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


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
