"""InfiniBand port counters from sysfs: /sys/class/infiniband/<hca>/ports/<n>/.

``port_xmit_data`` and ``port_rcv_data`` count 4-byte words (IBA spec,
PortXmitData/PortRcvData "divided by 4"), so bytes are words x 4. Error
counters are passed on as totals; the processor takes their rates. A port is
named ``<hca>/<port>`` (``mlx5_0/1``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetwatch.collectors.host import KernelFile
from fleetwatch.frame import PortReading

WORD_BYTES = 4
REDISCOVER_EVERY = 60  # ticks: HCAs are hot-plugged rarely
_TOTALS = (("symbol_error", "ib_symbol_errors_total"), ("link_downed", "ib_link_downed_total"),
           ("port_rcv_errors", "ib_rcv_errors_total"))
_RATES = (("port_rcv_data", "ib_rx_bytes_per_s"), ("port_xmit_data", "ib_tx_bytes_per_s"))


def _read_int(f: KernelFile) -> float | None:
    try:
        return float(int(f.read()))
    except (OSError, ValueError):
        return None


@dataclass
class _Port:
    name: str
    totals: list[tuple[KernelFile, str]]
    rates: list[tuple[KernelFile, str]]
    state: KernelFile

    def close(self) -> None:
        for f, _ in self.totals + self.rates:
            f.close()
        self.state.close()


def parse_state(text: str) -> bool:
    """True for an ACTIVE port; sysfs writes the state as ``4: ACTIVE``."""
    return text.strip().upper().endswith("ACTIVE")


class InfinibandSource:
    def __init__(self, sys_root: str | Path = "/sys",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = os.path.join(str(sys_root), "class", "infiniband")
        self.clock = clock
        self._ports: list[_Port] = []
        self._prev: dict[str, tuple[float, dict[str, float]]] = {}
        self._reads = 0

    def _discover(self) -> None:
        ports = []
        try:
            hcas = sorted(os.listdir(self.root))
        except OSError:
            hcas = []
        for hca in hcas:
            pdir = os.path.join(self.root, hca, "ports")
            try:
                numbers = sorted(os.listdir(pdir), key=lambda p: int(p) if p.isdigit() else 0)
            except OSError:
                continue
            for n in numbers:
                path = os.path.join(pdir, n)
                c = os.path.join(path, "counters")
                ports.append(_Port(
                    f"{hca}/{n}",
                    [(KernelFile(os.path.join(c, file)), metric) for file, metric in _TOTALS],
                    [(KernelFile(os.path.join(c, file)), metric) for file, metric in _RATES],
                    KernelFile(os.path.join(path, "state"))))
        for port in self._ports:
            port.close()
        self._ports = ports

    def read(self) -> tuple[PortReading, ...]:
        if self._reads % REDISCOVER_EVERY == 0:
            self._discover()
        self._reads += 1
        now = self.clock()
        out = []
        for port in self._ports:
            name = port.name
            m: dict[str, float] = {}
            for f, metric in port.totals:
                v = _read_int(f)
                if v is not None:
                    m[metric] = v
            raw = {}
            for f, metric in port.rates:
                v = _read_int(f)
                if v is not None:
                    raw[metric] = v * WORD_BYTES
            prev = self._prev.get(name)
            self._prev[name] = (now, raw)
            if prev is not None and now > prev[0]:
                for metric, value in raw.items():
                    before = prev[1].get(metric)
                    # A smaller value is a reset (or a saturated 32-bit counter cleared).
                    if before is not None and value >= before:
                        m[metric] = (value - before) / (now - prev[0])
            with contextlib.suppress(OSError):
                m["ib_port_active"] = 1.0 if parse_state(port.state.text()) else 0.0
            out.append(PortReading(name, "ib", m))
        return tuple(out)

    def close(self) -> None:
        for port in self._ports:
            port.close()
