"""The systemd units of ``deploy/systemd``, read as systemd reads them, for the tests."""

from __future__ import annotations

import configparser
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "deploy" / "systemd"
# Where the README's installation puts the program and the cluster's configuration.
INSTALLED_BINARY = "/opt/fleetwatch/bin/fleetwatch"
INSTALLED_CONFIG = "/etc/fleetwatch/fleetwatch.toml"
CLUSTER_CONFIG = ROOT / "deploy" / "cluster.toml"


@dataclass(frozen=True)
class Unit:
    path: Path
    sections: dict[str, dict[str, str]]

    def get(self, section: str, key: str, default: str = "") -> str:
        return self.sections.get(section, {}).get(key, default)

    @property
    def exec_start(self) -> list[str]:
        return shlex.split(self.get("Service", "ExecStart"))

    def local_argv(self) -> list[str]:
        """ExecStart as this checkout runs it: this Python's fleetwatch, the repository's
        cluster configuration in place of the installed one."""
        argv = self.exec_start
        assert argv[0] == INSTALLED_BINARY, f"{self.path.name}: ExecStart runs {argv[0]}"
        rest = [str(CLUSTER_CONFIG) if a == INSTALLED_CONFIG else a for a in argv[1:]]
        return [sys.executable, "-m", "fleetwatch.cli", *rest]

    @property
    def stop_timeout_s(self) -> float:
        return float(self.get("Service", "TimeoutStopSec", "90"))


class _Repeated(dict):  # type: ignore[type-arg]
    """A section's keys as systemd reads them: a key given twice (SystemCallFilter=, an
    allow list then a deny list) keeps both values, one a line, in order."""

    def __setitem__(self, key: str, value: object) -> None:
        old = self.get(key)
        if isinstance(old, list) and isinstance(value, list):
            value = old + value
        super().__setitem__(key, value)


def read_unit(path: Path) -> Unit:
    parser = configparser.ConfigParser(interpolation=None, strict=False, delimiters=("=",),
                                       comment_prefixes=("#", ";"), empty_lines_in_values=False,
                                       dict_type=_Repeated)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read(path, encoding="utf-8")
    return Unit(path, {s: dict(parser[s]) for s in parser.sections()})


def units(suffix: str = "") -> list[Unit]:
    return [read_unit(p) for p in sorted(UNITS.glob(f"*{suffix}"))
            if p.suffix in (".service", ".timer")]
