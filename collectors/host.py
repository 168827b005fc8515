"""Host readings: CPU utilization, load, memory, and NIC rates, read from /proc.

The numbers are psutil's (``cpu_percent``, ``getloadavg``, ``net_io_counters``)
computed from the same kernel files; memory used is total minus available. Reading
them here rather than through psutil lets tests point ``proc_root``/``sys_root`` at a
checked-in fake tree, and costs a few file reads per tick instead of psutil's
per-call object churn.

Rates need two reads: the first tick after start has none (absent, not 0). A
driver's 32-bit counter that wraps gives the modular rate (``counters``). NICs are
the interfaces with a device; IPoIB ones (``ib0``) are left out, as the HCA port's
``ib_*_bytes_per_s`` already count their bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from fleetwatch.collectors.counters import counter_bits, counter_delta
from fleetwatch.frame import PortReading

log = logging.getLogger(__name__)

# /proc/net/dev column -> our metric, per direction (receive columns first, then transmit).
_NIC_COLUMNS = (
    (0, "nic_rx_bytes_per_s"), (1, "nic_rx_packets_per_s"), (2, "nic_rx_errors_per_s"),
    (8, "nic_tx_bytes_per_s"), (9, "nic_tx_packets_per_s"), (10, "nic_tx_errors_per_s"),
)
# Interfaces reported at most: each is a port in every frame. Beyond it the physical
# functions are kept before SR-IOV virtual functions (those have ``device/physfn``), and
# what is left out is said once in the log.
MAX_NICS = 64
ARPHRD_INFINIBAND = "32"  # /sys/class/net/<if>/type of an IPoIB interface (if_arp.h)


class KernelFile:
    """A /proc or /sys file kept open and re-read from offset 0 each tick.

    The kernel regenerates these files on every read at offset 0, so one open
    file descriptor serves every tick: that saves an open() and a close() per
    file per tick, which matters on a node with 8 HCAs x 6 counters.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def read(self) -> bytes:
        """The file's contents now; OSError when it is absent or unreadable."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(self._fd, 65536, 0)
            if len(data) == 65536:  # a long file (a node with many interfaces): read on
                chunks = [data]
                while chunk := os.pread(self._fd, 65536, sum(map(len, chunks))):
                    chunks.append(chunk)
                data = b"".join(chunks)
            return data
        except OSError:
            self.close()  # the device went away: reopen next time
            raise

    def text(self) -> str:
        return self.read().decode("ascii", "replace")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_small(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def parse_stat_cpu(text: str) -> tuple[float, float]:
    """(busy, total) jiffies from the aggregate ``cpu`` line of /proc/stat."""
    fields = text.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError("first line of /proc/stat is not the cpu line")
    # user nice system idle iowait irq softirq steal; guest time is already in user.
    values = [float(v) for v in fields[1:9]]
    total = sum(values)
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)
    return total - idle, total


def parse_meminfo(text: str) -> dict[str, float]:
    """Bytes from /proc/meminfo for the keys we use (its kB are KiB)."""
    out: dict[str, float] = {}
    # Linux writes these five first; the other ~50 lines need no parsing.
    for line in text.split("\n", 8)[:8]:
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached"):
            out[key] = float(rest.split()[0]) * 1024.0
    return out


def parse_net_dev(text: str, keep: Callable[[str], bool] = lambda name: True
                  ) -> dict[str, list[float]]:
    """Interface -> its 16 counters from /proc/net/dev, for the interfaces ``keep`` accepts."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        name = name.strip()
        if sep and keep(name):  # skip converting the numbers of the many virtual ones
            out[name] = [float(v) for v in rest.split()]
    return out


class HostSource:
    """Reads the host once per tick; keeps the previous counters to turn them into rates."""

    def __init__(self, proc_root: str | Path = "/proc", sys_root: str | Path = "/sys",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.proc = str(proc_root)
        self.sys = str(sys_root)
        self.clock = clock
        self._cpu: tuple[float, float] | None = None
        self._nics: dict[str, list[float]] = {}
        self._nic_t = 0.0
        self._physical: dict[str, bool] = {}
        self._vf: dict[str, bool] = {}
        self._said_capped = False
        self._has_sys_net = os.path.isdir(os.path.join(self.sys, "class", "net"))
        self._stat = KernelFile(f"{self.proc}/stat")
        self._loadavg = KernelFile(f"{self.proc}/loadavg")
        self._meminfo = KernelFile(f"{self.proc}/meminfo")
        self._netdev = KernelFile(f"{self.proc}/net/dev")

    def read(self) -> tuple[dict[str, float], tuple[PortReading, ...]]:
        metrics: dict[str, float] = {}
        self._read_cpu(metrics)
        with contextlib.suppress(OSError, ValueError, IndexError):
            metrics["host_load1"] = float(self._loadavg.read().split()[0])
        try:
            mem = parse_meminfo(self._meminfo.text())
            total = mem["MemTotal"]
            # Kernels before 3.14 have no MemAvailable: estimate it as psutil does.
            avail = mem.get("MemAvailable", mem.get("MemFree", 0.0) + mem.get("Buffers", 0.0)
                            + mem.get("Cached", 0.0))
            metrics["host_mem_total_bytes"] = total
            metrics["host_mem_used_bytes"] = max(0.0, total - avail)
        except (OSError, ValueError, KeyError, IndexError):
            pass
        return metrics, self._read_nics()

    def _read_cpu(self, metrics: dict[str, float]) -> None:
        try:
            busy, total = parse_stat_cpu(self._stat.text())
        except (OSError, ValueError):
            return
        prev, self._cpu = self._cpu, (busy, total)
        if prev is not None and total > prev[1]:
            util = 100.0 * (busy - prev[0]) / (total - prev[1])
            metrics["host_cpu_util_pct"] = min(100.0, max(0.0, util))

    def _is_physical(self, name: str) -> bool:
        # Virtual interfaces (veth, bridges, docker0, cali*) have no backing device: a
        # Kubernetes node has hundreds of them and they only repeat the physical traffic.
        known = self._physical.get(name)
        if known is None:
            if name == "lo":
                known = False
            elif self._has_sys_net:
                base = os.path.join(self.sys, "class", "net", name)
                # IPoIB (ib0): its bytes are in the HCA port's ib_*_bytes_per_s already.
                known = (os.path.exists(os.path.join(base, "device"))
                         and _read_small(os.path.join(base, "type")) != ARPHRD_INFINIBAND)
                self._vf[name] = os.path.exists(os.path.join(base, "device", "physfn"))
            else:
                known = True
            self._physical[name] = known
        return known

    def _read_nics(self) -> tuple[PortReading, ...]:
        try:
            counters = parse_net_dev(self._netdev.text(), self._is_physical)
        except (OSError, ValueError):
            return ()
        now = self.clock()
        dt = now - self._nic_t
        prev, self._nics, self._nic_t = self._nics, {}, now
        ports = []
        names = [n for n, values in counters.items() if len(values) >= 11]
        if len(names) > MAX_NICS:
            names = self._cap(names)
        for name in names:
            values = counters[name]
            self._nics[name] = values
            before = prev.get(name)
            if before is None or dt <= 0:
                continue
            m = {}
            for col, metric in _NIC_COLUMNS:
                # A driver's 32-bit counter wraps: the modular delta. A reset: skip one tick.
                delta = counter_delta(before[col], values[col],
                                      counter_bits(before[col], values[col]))
                if delta is not None:
                    m[metric] = delta / dt
            ports.append(PortReading(name, "nic", m))
        return tuple(ports)

    def _cap(self, names: list[str]) -> list[str]:
        """MAX_NICS of ``names``, physical functions first; what is left out said once."""
        ordered = sorted(names, key=lambda n: self._vf.get(n, False))  # stable: PFs first
        kept, left = ordered[:MAX_NICS], ordered[MAX_NICS:]
        if not self._said_capped:
            self._said_capped = True
            vfs = sum(self._vf.get(n, False) for n in left)
            log.warning("%d network interfaces with a device; the first %d are reported "
                        "(MAX_NICS), physical functions before SR-IOV virtual functions; "
                        "left out: %d (%d of them VFs), e.g. %s", len(names), MAX_NICS,
                        len(left), vfs, ", ".join(left[:5]))
        return kept

    def close(self) -> None:
        for f in (self._stat, self._loadavg, self._meminfo, self._netdev):
            f.close()
