"""CPU package power from RAPL: /sys/class/powercap/intel-rapl:<n>/energy_uj.

Power is the rate of the energy counter, summed over packages (AMD CPUs expose
the same ``intel-rapl`` zones). The counter wraps at ``max_energy_range_uj``:
a smaller reading than the last one means it went round once. Since the
PLATYPUS side channel (CVE-2020-8694) ``energy_uj`` is readable by root only:
the agent then logs one line and reports no CPU power. A package whose counter
fails to read (EIO) is named once in the log, and there is no CPU power until it
reads again: a sum without it would understate the CPU's power.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from fleetwatch.collectors.host import KernelFile

log = logging.getLogger(__name__)

_PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")  # intel-rapl:0:0 etc. are sub-zones


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read().strip()


def energy_delta(before: int, after: int, max_range: int) -> int:
    """Microjoules between two readings of a counter that wraps at ``max_range``."""
    return after - before if after >= before else after + max_range - before


class RaplSource:
    def __init__(self, sys_root: str | Path = "/sys",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = os.path.join(str(sys_root), "class", "powercap")
        self.clock = clock
        self._zones: list[tuple[KernelFile, int]] = []  # (energy_uj, its max range)
        self._prev: list[int] | None = None
        self._t = 0.0
        self._disabled = False
        self._failing: str | None = None  # the zone said unreadable in the log
        self._discover()

    def _discover(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.root) if _PACKAGE_ZONE.match(n))
        except OSError:
            return
        for n in names:
            zone = os.path.join(self.root, n)
            try:
                if not _read(os.path.join(zone, "name")).startswith("package"):
                    continue
                max_range = int(_read(os.path.join(zone, "max_energy_range_uj")))
            except (OSError, ValueError):
                continue
            self._zones.append((KernelFile(os.path.join(zone, "energy_uj")), max_range))

    def read(self) -> dict[str, float]:
        if self._disabled or not self._zones:
            return {}
        now_e = []
        for f, _ in self._zones:
            try:
                now_e.append(int(f.read()))
            except PermissionError:
                log.warning("RAPL energy_uj is readable by root only: no CPU power "
                            "(run the agent as root to get host_cpu_power_w)")
                self._disabled = True
                return {}
            except (OSError, ValueError) as exc:
                # A sum without one package would understate the CPU's power: none instead.
                if self._failing != f.path:
                    log.warning("RAPL %s unreadable (%s): host_cpu_power_w is left out "
                                "until it reads", f.path, getattr(exc, "strerror", None) or exc)
                self._failing = f.path
                self._prev = None  # the next good read starts the rate afresh
                return {}
        if self._failing is not None:
            log.info("RAPL %s reads again", self._failing)
            self._failing = None
        now = self.clock()
        prev, t0 = self._prev, self._t
        self._prev, self._t = now_e, now
        if prev is None or now <= t0:
            return {}
        uj = sum(energy_delta(a, b, rng)
                 for a, b, (_, rng) in zip(prev, now_e, self._zones, strict=True))
        return {"host_cpu_power_w": uj / 1e6 / (now - t0)}

    def close(self) -> None:
        for f, _ in self._zones:
            f.close()
