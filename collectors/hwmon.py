"""The node's inlet (ambient) air temperature from the sensors the kernel exposes in hwmon.

Thermal detection compares a GPU with the air it breathes, so the agent reports
``host_inlet_temp_c`` where the machine has such a sensor: a
``/sys/class/hwmon/hwmon*/temp<N>_input`` (millidegrees Celsius, the hwmon ABI)
whose ``temp<N>_label`` names an inlet, ambient or intake sensor (BMC-backed
drivers and some platform drivers label them so). Several such sensors: their
mean. None: the metric is absent, never invented. IPMI sensors that the kernel
does not publish in hwmon (read by ipmitool through /dev/ipmi0) are not read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from fleetwatch.collectors.host import KernelFile

_INLET = re.compile(r"inlet|ambient|intake|front panel", re.IGNORECASE)
REDISCOVER_EVERY = 60  # reads
MIN_C, MAX_C = -40.0, 100.0  # the catalogue's range for host_inlet_temp_c


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().strip()


class InletSource:
    def __init__(self, sys_root: str | Path = "/sys") -> None:
        self.root = os.path.join(str(sys_root), "class", "hwmon")
        self._sensors: list[KernelFile] = []
        self._reads = 0

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
            except (OSError, ValueError):
                continue
            if MIN_C <= c <= MAX_C:
                values.append(c)
        return {"host_inlet_temp_c": sum(values) / len(values)} if values else {}

    def close(self) -> None:
        for f in self._sensors:
            f.close()
