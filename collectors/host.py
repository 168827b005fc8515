"""Host readings: CPU utilization, load, memory, and NIC rates, read from /proc.

The numbers are psutil's (``cpu_percent``, ``getloadavg``, ``virtual_memory``,
``net_io_counters``) computed from the same kernel files; reading them here
rather than through psutil lets tests point ``proc_root``/``sys_root`` at a
checked-in fake tree, and costs a few file reads per tick instead of psutil's
per-call object churn.

Rates need two reads: the first tick after start has none (absent, not 0).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from fleetwatch.frame import PortReading

# /proc/net/dev column -> our metric, per direction (receive columns first, then transmit).
_NIC_COLUMNS = (
    (0, "nic_rx_bytes_per_s"), (1, "nic_rx_packets_per_s"), (2, "nic_rx_errors_per_s"),
    (8, "nic_tx_bytes_per_s"), (9, "nic_tx_packets_per_s"), (10, "nic_tx_errors_per_s"),
)
MAX_NICS = 64


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
                known = os.path.exists(os.path.join(self.sys, "class", "net", name, "device"))
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
        for name, values in counters.items():
            if len(values) < 11 or len(self._nics) >= MAX_NICS:
                continue
            self._nics[name] = values
            before = prev.get(name)
            if before is None or dt <= 0:
                continue
            m = {}
            for col, metric in _NIC_COLUMNS:
                delta = values[col] - before[col]
                if delta >= 0:  # a negative delta is a counter reset: skip one tick
                    m[metric] = delta / dt
            ports.append(PortReading(name, "nic", m))
        return tuple(ports)

    def close(self) -> None:
        for f in (self._stat, self._loadavg, self._meminfo, self._netdev):
            f.close()
