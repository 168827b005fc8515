"""The node's inlet (ambient) air temperature from the sensors the kernel exposes in hwmon.

Thermal detection compares a GPU with the air it breathes, so the agent reports
``host_inlet_temp_c`` where the machine has such a sensor: a
``/sys/class/hwmon/hwmon*/temp<N>_input`` (millidegrees Celsius, the hwmon ABI)
whose ``temp<N>_label`` names an inlet, ambient or intake sensor (BMC-backed
drivers and some platform drivers label them so). Several such sensors: their
mean of those that read a plausible value (``INLET_FLOOR_C`` up; a failing or
implausible sensor is said once in the log). None: the metric is absent, never
invented. IPMI sensors that the kernel does not publish in hwmon (read by ipmitool
through /dev/ipmi0) are not read.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from fleetwatch.collectors.host import KernelFile

log = logging.getLogger(__name__)

_INLET = re.compile(r"inlet|ambient|intake|front panel", re.IGNORECASE)
REDISCOVER_EVERY = 60  # reads
MIN_C, MAX_C = -40.0, 100.0  # the catalogue's range for host_inlet_temp_c
# The air a running server breathes is not colder than this: ASHRAE's allowable inlet
# range starts at 5 C (classes A3/A4). A reading below, 0 C above all, is a lost sensor
# (a BMC reports 0 when it cannot read one): left out of the mean, said once.
INLET_FLOOR_C = 5.0


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().strip()


class InletSource:
    def __init__(self, sys_root: str | Path = "/sys") -> None:
        self.root = os.path.join(str(sys_root), "class", "hwmon")
        self._sensors: list[KernelFile] = []
        self._reads = 0
        self._said: set[str] = set()  # sensors said failing or implausible in the log

    def _discover(self) -> None:
        found = []
        try:
            chips = sorted(os.listdir(self.root))
        except OSError:
            chips = []
        for chip in chips:
            base = os.path.join(self.root, chip)
            try:
                names = sorted(os.listdir(base))
            except OSError:
                continue
            for name in names:
                m = re.fullmatch(r"(temp\d+)_label", name)
                if not m:
                    continue
                try:
                    label = _read(os.path.join(base, name))
                except OSError:
                    continue
                if _INLET.search(label):
                    found.append(KernelFile(os.path.join(base, f"{m[1]}_input")))
        self.close()
        self._sensors = found

    def read(self) -> dict[str, float]:
        if self._reads % REDISCOVER_EVERY == 0:
            self._discover()
        self._reads += 1
        values = []
        for f in self._sensors:
            try:
                c = int(f.read()) / 1000.0  # millidegrees
            except (OSError, ValueError) as exc:
                self._say(f.path, f"unreadable ({getattr(exc, 'strerror', None) or exc})")
                continue
            if INLET_FLOOR_C <= c <= MAX_C:
                values.append(c)
                self._said.discard(f.path)
            else:
                self._say(f.path, f"reads {c:g} C, outside {INLET_FLOOR_C:g}..{MAX_C:g} C "
                                  "(a lost sensor)")
        return {"host_inlet_temp_c": sum(values) / len(values)} if values else {}

    def _say(self, path: str, why: str) -> None:
        if path not in self._said:
            self._said.add(path)
            log.warning("inlet temperature sensor %s %s: left out of host_inlet_temp_c "
                        "until it reads right", path, why)

    def close(self) -> None:
        for f in self._sensors:
            f.close()
