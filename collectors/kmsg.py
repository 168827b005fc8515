"""XIDs from the kernel log: the NVIDIA driver's ``NVRM: Xid (PCI:...): <code>, ...`` lines.

NVML's XID events are the primary source; the kernel log catches what they
miss (NVML not running yet when it happened, events that NVML does not
deliver in some VMs, an event set that failed to open). ``xid_merge.XidMerger``
counts an XID once when both report it. This module is the reading: ``KernelLog``
follows /dev/kmsg or a text log and hands each line to ``xid_parse``, which finds the
XID and folds a burst of lines into one event; ``KernelLog.poll`` returns one event
per burst, with the number of lines it was printed as in ``XidLine.lines``.

A text log (``agent.kernel_log = /var/log/kern.log``) is followed across logrotate:
truncated in place (``copytruncate``) it is read again from the top; renamed and
created anew (the default) the rest of the old file is read, then the new one from
its start.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat

from fleetwatch.collectors.xid_parse import XidLine, fold_bursts, parse_kmsg_record, parse_xid

log = logging.getLogger(__name__)

# printk's rate limit: "<function>: N callbacks suppressed" names the function whose lines
# it dropped. The NVIDIA driver's (krcReportXid, NVRM, nvidia*, nv_*) may have been XIDs;
# another driver's (nvme_*, ext4_*, net_ratelimit) are not ours to count.
_SUPPRESSED = re.compile(r"(?:^|[\]\s;])(krc\w*|NVRM|nvidia\w*|nv_\w*):? (\d{1,9}) "
                         r"callbacks suppressed")
READ_SIZE = 8192  # /dev/kmsg records are at most ~1 KiB; a short buffer fails with EINVAL
MAX_RECORDS_PER_POLL = 4096


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
