"""The metric catalogue: every metric's name, unit, DCGM field, range and help.

It is data (``catalogue.csv``), checked on load with the line number of any
mistake. The collector, the codec, the store, the exporter and the dashboard
all read it, so a metric is defined in exactly one place.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

Scope = Literal["gpu", "host", "port"]
Kind = Literal["gauge", "counter"]

_SCOPES = ("gpu", "host", "port")
_KINDS = ("gauge", "counter")
_COLUMNS = ["id", "name", "scope", "kind", "unit", "dcgm", "dcgm_scale", "min", "max", "source",
            "help"]

# NVML clocks-event (throttle) reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_FLAGS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}


# Other DCGM names of a catalogue metric's field, as recordings carry them (the catalogue's
# ``dcgm`` column holds the name dcgm-exporter's default counters use). dcgm_fields.h:
# DCGM 3.2 renamed field 112 DCGM_FI_DEV_CLOCKS_EVENT_REASONS and kept
# DCGM_FI_DEV_CLOCK_THROTTLE_REASONS as a deprecated alias of it; field 160
# DCGM_FI_DEV_POWER_MGMT_LIMIT is the current power limit in W (nvmlDeviceGetPowerManagement
# Limit), which the driver enforces unless another limiter holds it lower.
DCGM_ALIASES: dict[str, str] = {
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "gpu_throttle_reasons",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "gpu_power_limit_w",
}


@cache
def dcgm_field_names() -> frozenset[str]:
    """Every DCGM field name DCGM defines (``dcgm_fields.csv``, from its dcgm_fields.h)."""
    text = resources.files("fleetwatch").joinpath("dcgm_fields.csv").read_text("utf-8")
    names = [line.strip() for line in text.splitlines() if line.strip()[:1] not in ("#", "")]
    return frozenset(names[1:])  # after the header line "name"


def throttle_flags(mask: float | int) -> list[str]:
    """Names of the throttle reasons set in an NVML clocks-event bitmask."""
    bits = int(mask)
    return [name for name, bit in THROTTLE_FLAGS.items() if bits & bit]


@dataclass(frozen=True, slots=True)
class Metric:
    id: int
    name: str
    scope: Scope
    kind: Kind
    unit: str
    dcgm: str | None
    dcgm_scale: float
    min: float
    max: float
    source: str
    help: str


class CatalogueError(ValueError):
    """The catalogue file is malformed; the message names the line."""


@dataclass(frozen=True)
class Catalogue:
    metrics: tuple[Metric, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {m.name: m for m in self.metrics})
        object.__setattr__(self, "_by_id", {m.id: m for m in self.metrics})

    def __getitem__(self, name: str) -> Metric:
        return self._by_name[name]  # type: ignore[attr-defined]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name  # type: ignore[attr-defined]

    def by_id(self, metric_id: int) -> Metric | None:
        return self._by_id.get(metric_id)  # type: ignore[attr-defined]

    def scope(self, scope: Scope) -> list[Metric]:
        return [m for m in self.metrics if m.scope == scope]


def parse(text: str, origin: str = "catalogue.csv") -> Catalogue:
    """Parse and check catalogue CSV text; comment lines start with '#'."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise CatalogueError(f"{origin}: no header line")
    header_no, header = lines[0]
    columns = next(csv.reader([header]))
    if columns != _COLUMNS:
        raise CatalogueError(f"{origin} line {header_no}: header must be {','.join(_COLUMNS)}")
    metrics: list[Metric] = []
    seen_ids: set[int] = set()
    seen_names: set[str] = set()
    for n, line in lines[1:]:
        row = next(csv.reader([line]))
        where = f"{origin} line {n}"
        if len(row) != len(_COLUMNS):
            raise CatalogueError(f"{where}: expected {len(_COLUMNS)} columns, found {len(row)}")
        metric = _metric(dict(zip(_COLUMNS, row)), where)
        if metric.id in seen_ids:
            raise CatalogueError(f"{where}: id {metric.id} is used twice")
        if metric.name in seen_names:
            raise CatalogueError(f"{where}: name {metric.name!r} is used twice")
        seen_ids.add(metric.id)
        seen_names.add(metric.name)
        metrics.append(metric)
    return Catalogue(tuple(metrics))


def _metric(f: dict[str, str], where: str) -> Metric:
    try:
        metric_id = int(f["id"])
    except ValueError:
        raise CatalogueError(f"{where}: id {f['id']!r} is not a whole number") from None
    try:
        lo, hi, scale = float(f["min"]), float(f["max"]), float(f["dcgm_scale"])
    except ValueError:
        raise CatalogueError(f"{where}: min, max and dcgm_scale must be numbers") from None
    if not 0 < metric_id < 65536:
        raise CatalogueError(f"{where}: id must be in 1..65535")
    if f["scope"] not in _SCOPES:
        raise CatalogueError(f"{where}: scope {f['scope']!r} is not one of {_SCOPES}")
    if f["kind"] not in _KINDS:
        raise CatalogueError(f"{where}: kind {f['kind']!r} is not one of {_KINDS}")
    if not f["name"].isidentifier() or not f["name"].startswith(("gpu_", "host_", "nic_", "ib_")):
        raise CatalogueError(f"{where}: name {f['name']!r} must be snake_case with a scope prefix")
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise CatalogueError(f"{where}: min must be below max")
    return Metric(metric_id, f["name"], f["scope"], f["kind"], f["unit"],  # type: ignore[arg-type]
                  f["dcgm"] or None, scale, lo, hi, f["source"], f["help"])


@cache
def catalogue() -> Catalogue:
    """The catalogue shipped with fleetwatch."""
    text = resources.files("fleetwatch").joinpath("catalogue.csv").read_text("utf-8")
    return parse(text)
