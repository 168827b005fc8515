"""InfiniBand port counters from sysfs: /sys/class/infiniband/<hca>/ports/<n>/.

``port_xmit_data`` and ``port_rcv_data`` count 4-byte words (IBA spec,
PortXmitData/PortRcvData "divided by 4"), so bytes are words x 4. Error
counters are passed on as totals; the processor takes their rates. A port is
named ``<hca>/<port>`` (``mlx5_0/1``).

The kernel shows the 64-bit PortCountersExtended values in the same files where
the HCA supports them (mlx5 does), else the 32-bit PortCounters. A 32-bit data
counter saturates at 0xFFFFFFFF (IBA) rather than wrapping: after 16 GiB, seconds
at 100 Gb/s. A data counter at that value is unknown: its rate is left out (never
0 B/s) and the port is named once in the log. A 64-bit counter wraps at 2^64: the
rate across the wrap is the modular one (``counters.counter_delta``).

The HCA list is looked at every read (one directory listing): a hot-added HCA is
read from the next tick on, a removed one is said once in the log and dropped.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleetwatch.collectors.counters import counter_delta
from fleetwatch.collectors.host import KernelFile
from fleetwatch.frame import PortReading

log = logging.getLogger(__name__)

WORD_BYTES = 4
SATURATED_32 = (1 << 32) - 1  # a 32-bit PortCounters data counter that stopped counting
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
    saturated: set[str] = field(default_factory=set)  # counters said saturated in the log
    state_failing: bool = False

    def close(self) -> None:
        for f, _ in self.totals + self.rates:
            f.close()
        self.state.close()


def parse_state(text: str) -> bool:
    """True for an ACTIVE port; sysfs writes the state as ``4: ACTIVE``."""
    return text.strip().upper().endswith("ACTIVE")


def word_rate(before: float, after: float, seconds: float) -> float | None:
    """Bytes/s between two readings of a data counter in words; None when unknown
    (a saturated 32-bit counter, a reset)."""
    if after == SATURATED_32 or seconds <= 0:
        return None
    # A counter above 32 bits is a 64-bit one, which wraps; below, a smaller value is a reset.
    delta = counter_delta(before, after, 64) if before > SATURATED_32 else (
        after - before if after >= before else None)
    return None if delta is None else delta * WORD_BYTES / seconds


class InfinibandSource:
    def __init__(self, sys_root: str | Path = "/sys",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = os.path.join(str(sys_root), "class", "infiniband")
        self.clock = clock
        self._hcas: list[str] | None = None
        self._ports: list[_Port] = []
        self._prev: dict[str, tuple[float, dict[str, float]]] = {}

    def _list_hcas(self) -> list[str]:
        try:
            return sorted(os.listdir(self.root))
        except OSError:
            return []

    def _discover(self, hcas: list[str]) -> None:
        if self._hcas is not None:
            gone = sorted(set(self._hcas) - set(hcas))
            new = sorted(set(hcas) - set(self._hcas))
            if gone:
                log.warning("InfiniBand HCA %s is gone from %s (removed or its driver "
                            "unloaded): its ports are no longer reported", ", ".join(gone),
                            self.root)
            if new:
                log.info("InfiniBand HCA %s found: its ports are reported from now on",
                         ", ".join(new))
        kept = {p.name: p for p in self._ports}
        ports = []
        for hca in hcas:
            pdir = os.path.join(self.root, hca, "ports")
            try:
                numbers = sorted(os.listdir(pdir), key=lambda p: int(p) if p.isdigit() else 0)
            except OSError:
                continue
            for n in numbers:
                name = f"{hca}/{n}"
                if name in kept:  # a port seen before keeps its open files and log state
                    ports.append(kept.pop(name))
                    continue
                path = os.path.join(pdir, n)
                c = os.path.join(path, "counters")
                ports.append(_Port(
                    name,
                    [(KernelFile(os.path.join(c, file)), metric) for file, metric in _TOTALS],
                    [(KernelFile(os.path.join(c, file)), metric) for file, metric in _RATES],
                    KernelFile(os.path.join(path, "state"))))
        for port in kept.values():
            port.close()
            self._prev.pop(port.name, None)
        self._hcas, self._ports = hcas, ports

    def read(self) -> tuple[PortReading, ...]:
        hcas = self._list_hcas()
        if hcas != self._hcas:
            self._discover(hcas)
        now = self.clock()
        return tuple(PortReading(port.name, "ib", self._read_port(port, now))
                     for port in self._ports)

    def _read_port(self, port: _Port, now: float) -> dict[str, float]:
        m: dict[str, float] = {}
        for f, metric in port.totals:
            v = _read_int(f)
            if v is not None:
                m[metric] = v
        raw = {}
        for f, metric in port.rates:
            v = _read_int(f)
            if v is not None:
                raw[metric] = v
                self._say_saturated(port, f, v)
        prev = self._prev.get(port.name)
        self._prev[port.name] = (now, raw)
        if prev is not None:
            for metric, value in raw.items():
                before = prev[1].get(metric)
                rate = None if before is None else word_rate(before, value, now - prev[0])
                if rate is not None:
                    m[metric] = rate
        try:
            m["ib_port_active"] = 1.0 if parse_state(port.state.text()) else 0.0
            if port.state_failing:
                log.info("InfiniBand %s: its state reads again", port.name)
            port.state_failing = False
        except OSError as exc:
            if not port.state_failing:
                log.warning("InfiniBand %s: state unreadable (%s); ib_port_active is left "
                            "out until it reads", port.name, exc.strerror or exc)
            port.state_failing = True
        return m

    def _say_saturated(self, port: _Port, f: KernelFile, words: float) -> None:
        counter = os.path.basename(f.path)
        if words == SATURATED_32 and counter not in port.saturated:
            port.saturated.add(counter)
            log.warning("InfiniBand %s: %s is stuck at 0xFFFFFFFF, a saturated 32-bit "
                        "PortCounters counter (this HCA or kernel shows no 64-bit extended "
                        "counters): its bytes/s are unknown and left out, not 0, until the "
                        "counter is cleared (perfquery -R)", port.name, counter)
        elif words != SATURATED_32 and counter in port.saturated:
            port.saturated.discard(counter)
            log.info("InfiniBand %s: %s counts again", port.name, counter)

    def close(self) -> None:
        for port in self._ports:
            port.close()
