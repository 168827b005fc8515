"""XIDs from the kernel log: the NVIDIA driver's ``NVRM: Xid (PCI:...): <code>, ...`` lines.

NVML's XID events are the primary source; the kernel log catches what they
miss (NVML not running yet when it happened, events that NVML does not
deliver in some VMs, an event set that failed to open). ``XidMerger`` counts an
XID once when both report it. The driver prints one fault as a burst of lines
(an XID 13 line per faulting SM): ``KernelLog.poll`` returns one event per burst,
with the number of lines it was printed as in ``XidLine.lines`` (see ``BURST_S``).

Two kinds of input, both parsed by ``parse_xid``:

* /dev/kmsg records: ``6,1234,5678901,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=...``
  (one record per read(); continuation lines start with a space);
* dmesg text: ``[Sun Feb 23 16:24:18 2025] NVRM: Xid ...`` or
  ``kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid ...``.

A text log (``agent.kernel_log = /var/log/kern.log``) is followed across logrotate:
truncated in place (``copytruncate``) it is read again from the top; renamed and
created anew (the default) the rest of the old file is read, then the new one from
its start.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

# The forms the driver prints, from NVIDIA/open-gpu-kernel-modules (595.45.04,
# src/nvidia/src/kernel/gpu/rc/kernel_rc.c, krcReportXid's XID_PRINT_WITH_ATTR):
#   "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s"
#   "NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u): %d, ..."              an XID of a MIG GPU instance
#   "NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u): %d, ..."  ... and compute instance
# (kern_gpu_error_cont_ga100.c documents "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194,
# Contained: ..."). Older drivers, long before the open modules, printed the address
# without "PCI:", as their kernel logs show: "NVRM: Xid (0000:01:00): 8, Channel 00000020".
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):"
    r"(?P<dev>[0-9a-fA-F]{2})(?:\.[0-7])?"
    r"(?: GPU-I:(?P<gi>\d{1,5})(?: GPU-CI:(?P<ci>\d{1,5}))?)?"
    r"\): (?P<code>\d+),\s*(?P<msg>.*)$")
# When the driver printed the line, from the prefix a log gives it: a /dev/kmsg header's
# microseconds, dmesg's ``[  79.497354]``, an ISO stamp with a fraction, or a whole-second
# stamp (``dmesg -T``, syslog), which only folds lines printed in the same second.
_KMSG_USEC = re.compile(r"^\s*\d+,\d+,(\d+),")
_RAW_STAMP = re.compile(r"\[\s*(\d+\.\d+)\]")
_ISO_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[,.](\d{1,9}))?")
_CLOCK_STAMP = re.compile(r"(\d\d):(\d\d):(\d\d)")
# One fault is printed as a burst of lines: an SM exception as an XID 13 line per faulting
# SM and exception (16 lines within 2 ms in tests/data/failure_logs), each its own XID line.
# Lines of the same GPU, code and MIG instance less than BURST_S apart are one event;
# separate faults of the same code come seconds apart (XID 119 every 6 s, XID 69 every 1-2 s
# in real logs), so they stay separate events.
BURST_S = 0.1
# printk's rate limit: "<function>: N callbacks suppressed" names the function whose lines
# it dropped. The NVIDIA driver's (krcReportXid, NVRM, nvidia*, nv_*) may have been XIDs;
# another driver's (nvme_*, ext4_*, net_ratelimit) are not ours to count.
_SUPPRESSED = re.compile(r"(?:^|[\]\s;])(krc\w*|NVRM|nvidia\w*|nv_\w*):? (\d{1,9}) "
                         r"callbacks suppressed")
READ_SIZE = 8192  # /dev/kmsg records are at most ~1 KiB; a short buffer fails with EINVAL
MAX_RECORDS_PER_POLL = 4096


@dataclass(frozen=True, slots=True)
class XidLine:
    pci: str    # normalized: ``0000:9b:00``
    xid: int
    message: str
    # MIG: the GPU instance (and compute instance) the driver charged the XID to.
    gpu_instance: int | None = None
    compute_instance: int | None = None
    # Seconds on the log's own clock (None: the line carries no stamp we read).
    at: float | None = None
    # Kernel-log lines this event was printed as (see BURST_S); the first line's message.
    lines: int = 1


def pci_key(bus_id: str) -> str:
    """``00000000:9B:00.0`` (NVML) or ``0000:9b:00`` (kernel log) -> ``0000:9b:00``."""
    s = bus_id.strip().lower()
    s = s.split(".", 1)[0]
    parts = s.split(":")
    if len(parts) != 3:
        return s
    domain, bus, dev = parts
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"


def line_time(prefix: str) -> float | None:
    """Seconds (on that log's clock) that a line's prefix stamps it with; None without one."""
    if m := _KMSG_USEC.match(prefix):
        return int(m[1]) / 1e6
    if m := _RAW_STAMP.search(prefix):
        return float(m[1])
    if m := _ISO_STAMP.search(prefix):
        y, mo, d, h, mi, sec = (int(v) for v in m.groups()[:6])
        days = (y * 12 + mo) * 31 + d  # monotonic in the date; bursts never span days anyway
        frac = float(f"0.{m[7]}") if m[7] else 0.0
        return ((days * 24 + h) * 60 + mi) * 60 + sec + frac
    if m := _CLOCK_STAMP.search(prefix):
        return (int(m[1]) * 60 + int(m[2])) * 60 + int(m[3])
    return None


def parse_xid(line: str) -> XidLine | None:
    """The XID in one kernel-log line, or None if it holds none."""
    if "NVRM: Xid" not in line:  # fast path: almost every line
        return None
    m = _XID.search(line.rstrip("\n"))
    if m is None:
        return None
    digits = m["code"]
    # XIDs are small numbers (1..~160 today); thousands of digits would also exceed
    # Python's int() limit and raise. Either way the line is not an XID we can use.
    if len(digits) > 5:
        return None
    code = int(digits)
    if not 0 < code < 1 << 16:
        return None
    pci = f"{int(m['domain'], 16):04x}:{m['bus'].lower()}:{m['dev'].lower()}"
    gi, ci = m["gi"], m["ci"]
    return XidLine(pci, code, m["msg"].strip(), int(gi) if gi is not None else None,
                   int(ci) if ci is not None else None, line_time(line[:m.start()]))


def parse_kmsg_record(record: bytes) -> XidLine | None:
    """The XID in one /dev/kmsg record: ``prio,seq,usec,flags;message``, then `` KEY=v`` lines."""
    header, _, body = record.decode("utf-8", "replace").partition(";")
    x = parse_xid(body.split("\n", 1)[0])
    if x is None:
        return None
    return dataclasses.replace(x, at=line_time(header + ","))


def parse_lines(lines: Iterable[str]) -> list[XidLine]:
    return [x for x in map(parse_xid, lines) if x is not None]


def _burst_key(x: XidLine) -> tuple[str, int, int | None, int | None]:
    return x.pci, x.xid, x.gpu_instance, x.compute_instance


def fold_bursts(lines: Iterable[XidLine],
                last: dict[tuple[str, int, int | None, int | None], float] | None = None
                ) -> tuple[list[XidLine], int]:
    """One XidLine per burst (see BURST_S) with its line count; and how many lines
    continued a burst already returned (``last``: each key's latest stamp, kept across
    polls by the caller and updated here). A line with no stamp is an event of its own."""
    last = {} if last is None else last
    out: list[XidLine] = []
    open_: dict[tuple[str, int, int | None, int | None], int] = {}  # key -> index in out
    late = 0
    for x in lines:
        key = _burst_key(x)
        before = last.get(key)
        if x.at is not None:
            last[key] = x.at
        if x.at is None or before is None or not 0 <= x.at - before <= BURST_S:
            open_[key] = len(out)
            out.append(x)
        elif key in open_:
            k = open_[key]
            out[k] = dataclasses.replace(out[k], lines=out[k].lines + 1)
        else:
            late += 1  # its burst's first lines came in the previous poll
    return out, late


class KernelLogError(ValueError):
    """``agent.kernel_log`` names something that is not a log: the message says what to set."""


class KernelLog:
    """Follows the kernel log without blocking: /dev/kmsg, or a text file (tests, replays).

    It starts at the end of the log, as NVML's event set starts at registration,
    so a restart of the agent does not report old XIDs again. A path that is not
    a character device or a regular file (a directory, a FIFO) is refused at start
    with ``KernelLogError``; a line that names an XID but cannot be read as one is
    counted in ``malformed`` and logged, and the lines around it are kept.
    """

    def __init__(self, path: str = "/dev/kmsg", from_start: bool = False) -> None:
        self.path = path
        self._fd: int | None = None
        self._text_pos = 0
        self._char_dev = False
        self._pending = ""
        # A text log renamed away by logrotate: (fd, position, partial line), read once
        # more at the next poll for what its writer added before it reopened the log.
        self._retired: tuple[int, int, str] | None = None
        self._reopen_failed = False
        self.malformed = 0
        # Records the kernel overwrote before we read them (/dev/kmsg EPIPE: the gap in
        # sequence numbers), and XID lines the kernel's printk rate limit suppressed:
        # XIDs may have been missed in both. Counted here; the node reports them.
        self.overrun = 0
        self.suppressed = 0
        self._seq: int | None = None
        self._after_overrun = False
        # Lines that continued a burst already returned by the previous poll (BURST_S).
        self.late_burst_lines = 0
        self._burst_last: dict[tuple[str, int, int | None, int | None], float] = {}
        self._open(from_start)

    def _open(self, from_start: bool) -> None:
        try:
            mode = os.stat(self.path).st_mode
        except OSError:
            mode = 0
        if mode and not (stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
            kind = "a directory" if stat.S_ISDIR(mode) else "neither a file nor a device"
            raise KernelLogError(
                f"agent.kernel_log = {self.path!r} is {kind}; point it at /dev/kmsg or a "
                "kernel log file, or set it to \"\" to take XIDs from NVML events only")
        try:
            self._char_dev = stat.S_ISCHR(mode)
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            log.warning("kernel log %s unreadable (%s): XIDs come from NVML events only; "
                        "run the agent as root or with CAP_SYSLOG to read it",
                        self.path, exc.strerror or exc)
            self._fd = None
            return
        if not from_start:
            self._text_pos = os.lseek(self._fd, 0, os.SEEK_END)

    def poll(self) -> list[XidLine]:
        """The XID events since the last poll: one per burst of lines (``XidLine.lines``)."""
        if self._fd is None:
            return []
        lines = self._poll_kmsg() if self._char_dev else self._poll_text()
        if len(self._burst_last) > 4096:  # a key per GPU, code and MIG instance: stays small
            self._burst_last.clear()
        events, late = fold_bursts(lines, self._burst_last)
        self.late_burst_lines += late
        return events

    def _poll_kmsg(self) -> list[XidLine]:
        assert self._fd is not None
        out = []
        for _ in range(MAX_RECORDS_PER_POLL):
            try:
                record = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # the ring overwrote records we had not read
                    self._after_overrun = True
                    continue
                raise
            if not record:
                break
            self._count_gap(record)
            self._count_suppressed(record.decode("utf-8", "replace").partition(";")[2])
            x = parse_kmsg_record(record)
            if x is not None:
                out.append(x)
            elif b"NVRM: Xid" in record:
                self._malformed(record.decode("utf-8", "replace"))
        return out

    def _count_gap(self, record: bytes) -> None:
        """After an EPIPE, the records lost: the gap in the ``prio,seq,...`` sequence."""
        try:
            seq = int(record.split(b",", 2)[1])
        except (IndexError, ValueError):
            return
        if self._after_overrun:
            lost = seq - self._seq - 1 if self._seq is not None else 0
            if lost > 0:
                self.overrun += lost
                if self.overrun == lost:  # the first overrun; later ones are counted only
                    log.warning("kernel log %s: %d records were overwritten before the agent "
                                "read them (ring buffer overrun); XIDs among them are missed "
                                "(counted in input_dropped, kernel_log_overrun)", self.path, lost)
        self._after_overrun = False
        self._seq = seq

    def _count_suppressed(self, line: str) -> None:
        """``krcReportXid: 12 callbacks suppressed``: printk's rate limit dropped XID lines."""
        m = _SUPPRESSED.search(line)
        if m is None:
            return
        self.suppressed += int(m[2])
        if self.suppressed == int(m[2]):
            log.warning("kernel log %s: the kernel suppressed %s NVIDIA driver lines (%s), "
                        "XIDs among them are missed; counted in input_dropped, "
                        "xid_suppressed", self.path, m[2], m[1])

    def _malformed(self, line: str) -> None:
        self.malformed += 1
        if self.malformed == 1 or self.malformed % 1000 == 0:
            log.warning("kernel log %s: %d XID lines could not be read, e.g. %r", self.path,
                        self.malformed, line[:200])

    def _poll_text(self) -> list[XidLine]:
        assert self._fd is not None
        lines: list[str] = []
        if self._retired is not None:
            fd, pos, pending = self._retired
            self._retired = None
            try:
                more, _, pending = self._read_text(fd, pos, pending)
            finally:
                os.close(fd)
            lines += more
            if pending:  # the file is finished: its last line will get no newline now
                lines.append(pending)
        more, self._text_pos, self._pending = self._read_text(self._fd, self._text_pos,
                                                              self._pending)
        lines += more
        fd = self._reopened()
        if fd is not None:
            self._retired = (self._fd, self._text_pos, self._pending)
            self._fd, self._text_pos, self._pending = fd, 0, ""
            more, self._text_pos, self._pending = self._read_text(fd, 0, "")
            lines += more
        out = []
        for line in lines:
            self._count_suppressed(line)
            x = parse_xid(line)
            if x is not None:
                out.append(x)
            elif "NVRM: Xid" in line:
                self._malformed(line)
        return out

    def _reopened(self) -> int | None:
        """The new file when the path now names another file than ours (rotated by rename)."""
        assert self._fd is not None
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return None  # renamed, not created yet: keep reading the old one
        ours = os.fstat(self._fd)
        if (now.st_ino, now.st_dev) == (ours.st_ino, ours.st_dev) or not stat.S_ISREG(now.st_mode):
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            # Keep what the old file gave this poll; say so once, try again next poll.
            if not self._reopen_failed:
                log.warning("kernel log %s was replaced (rotated) and the new file cannot be "
                            "opened (%s); still reading the old one, trying again every poll",
                            self.path, exc.strerror or exc)
            self._reopen_failed = True
            return None
        self._reopen_failed = False
        return fd

    def _read_text(self, fd: int, pos: int, pending: str) -> tuple[list[str], int, str]:
        """Whole lines from ``pos`` on: (lines, new position, the partial last line)."""
        if os.fstat(fd).st_size < pos:  # truncated in place (copytruncate)
            pos = 0
        chunks = []
        while True:
            data = os.pread(fd, 1 << 16, pos)
            if not data:
                break
            pos += len(data)
            chunks.append(data)
        if not chunks:
            return [], pos, pending
        text = pending + b"".join(chunks).decode("utf-8", "replace")
        lines = text.split("\n")
        pending = lines.pop()  # a partly written last line waits for the next poll
        if len(pending) > 1 << 20:  # no newline in a megabyte: not a log line
            self._malformed(pending)
            pending = ""
        return lines, pos, pending

    def close(self) -> None:
        if self._retired is not None:
            os.close(self._retired[0])
            self._retired = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class XidMerger:
    """Counts an XID seen by both NVML events and the kernel log once.

    Each report waits ``window_s`` for its twin from the other source; a twin
    within the window is the same event and is not reported again.
    """

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self._seen: dict[tuple[int, int], deque[tuple[float, str]]] = {}

    def add(self, gpu: int, xid: int, source: str) -> bool:
        """Record one report; True when it is new (not the twin of an earlier one)."""
        now = self.clock()
        q = self._seen.setdefault((gpu, xid), deque())
        while q and q[0][0] < now - self.window_s:
            q.popleft()
        for k, (_, src) in enumerate(q):
            if src != source:
                del q[k]
                return False
        q.append((now, source))
        return True

    def merge(self, nvml: Mapping[int, Iterable[int]], kernel: Iterable[tuple[int, int]]
              ) -> dict[int, list[int]]:
        """XIDs per GPU for this tick from both sources, each event once, NVML's first."""
        out: dict[int, list[int]] = {}
        for gpu, xids in nvml.items():
            for x in xids:
                if self.add(gpu, x, "nvml"):
                    out.setdefault(gpu, []).append(x)
        for gpu, x in kernel:
            if self.add(gpu, x, "kmsg"):
                out.setdefault(gpu, []).append(x)
        return out
