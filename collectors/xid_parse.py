"""NVIDIA XID lines of a kernel log, as data: parse one line or record, fold a burst into one event.

Pure functions, no I/O: ``kmsg.KernelLog`` reads the lines and hands them here. Two kinds
of input, both parsed by ``parse_xid``:

* /dev/kmsg records: ``6,1234,5678901,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=...``
  (one record per read(); continuation lines start with a space);
* dmesg text: ``[Sun Feb 23 16:24:18 2025] NVRM: Xid ...`` or
  ``kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid ...``.

The driver prints one fault as a burst of lines (an XID 13 line per faulting SM):
``fold_bursts`` makes it one event, with the number of lines it was printed as in
``XidLine.lines`` (see ``BURST_S``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

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
