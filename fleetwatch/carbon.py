"""Carbon: CO2e = energy x PUE x grid intensity, location-based (GHG Protocol scope 2).

Conventions (the same as CodeCarbon's, stated in every report):

* energy is the IT energy the ledger holds (GPUs, CPUs, the rest of the node),
  in kWh; the facility's overhead (cooling, power distribution) is added by
  the PUE: facility kWh = IT kWh x PUE;
* the grid intensity is location-based: the average emission factor of the
  grid the site draws from, in gCO2e per kWh (a file in another unit is converted,
  ``carbon_units``), never a market-based figure
  (certificates, PPAs); market-based reporting needs the supplier's factors;
* intensity and PUE are hourly when a series is configured (each ledger hour
  takes its own hour's factor), else constants; a missing hour in a series is
  filled by linear interpolation between its neighbours (up to
  ``MAX_INTERPOLATE_H`` hours apart), else by the fallback constant, and the
  report says how many hours were filled (and how many took the constant: a
  series that does not cover the month);
* a series finer than hourly (a grid's 5, 15 or 30 min figures) gives each
  hour the mean of its rows; its values are held to the ranges the config
  holds the constants to (``carbon.pue``, ``carbon.intensity_g_per_kwh``);
* without a site figure, the country default comes from CodeCarbon's
  ``global_energy_mix.json`` (Our World in Data / Ember, MIT licence), shipped
  in ``fleetwatch/data``.

Pure: files are read by ``read_hourly_csv`` and ``country_intensity``; the
model itself is numbers.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from zoneinfo import ZoneInfo

from fleetwatch.carbon_units import G_PER_KWH, implausible, parse_time, time_column, unit_in_name
from fleetwatch.config import CarbonConfig, ConfigError, EnergyConfig
from fleetwatch.config_rules import carbon_problems

log = logging.getLogger(__name__)

J_PER_KWH = 3.6e6
MAX_INTERPOLATE_H = 6
HOUR_S = 3600
# EIA-930's balance files hold every US balancing authority, one row per BA and hour.
BA_COLUMN = "Balancing Authority"


def _config_range(name: str) -> tuple[float, float]:
    """The range ``CarbonConfig`` allows the constant ``name``: a series of the same
    quantity is held to it, so that the file and the config cannot disagree on what is
    plausible (one place states it)."""
    field = next(f for f in dataclasses.fields(CarbonConfig) if f.name == name)
    lo, hi, _ = field.metadata["range"]
    return float(lo), float(hi)


PUE_RANGE = _config_range("pue")
INTENSITY_RANGE = _config_range("intensity_g_per_kwh")


class CarbonDataError(ConfigError):
    """A carbon or PUE data file (or country) is wrong; the message names the file, line and
    value. A configuration error: start-up stops with it."""


@dataclass(frozen=True)
class HourlySeries:
    """Values per hour (hour start, epoch seconds UTC), with where they came from."""

    values: dict[int, float]
    source: str

    def at(self, hour_ts: int) -> tuple[float | None, bool]:
        """(value, filled): the hour's value, interpolated across a short hole, or None."""
        v = self.values.get(hour_ts)
        if v is not None:
            return v, False
        for k in range(1, MAX_INTERPOLATE_H):
            before = self.values.get(hour_ts - k * HOUR_S)
            if before is None:
                continue
            for j in range(1, MAX_INTERPOLATE_H - k + 1):
                after = self.values.get(hour_ts + j * HOUR_S)
                if after is not None:
                    return before + (after - before) * k / (k + j), True
            break
        return None, True

    def span(self) -> tuple[int, int]:
        """(first, last) hour start the series holds: what a warning about hours taken from
        the fallback can quote."""
        return min(self.values), max(self.values)


def read_hourly_csv(path: str | Path, column: str,
                    allowed: tuple[float, float] = (0.0, math.inf), *, zone: str = "",
                    zone_key: str = "carbon.intensity_csv_timezone",
                    scale: float = 1.0) -> HourlySeries:
    """An hourly series from a CSV with a time column (``carbon_units.time_column``:
    ``timestamp``, or one whose name says UTC such as ``Datetime (UTC)``; ISO 8601, or
    EIA-930's month/day/year form in its UTC column: ``carbon_units.parse_time``) and
    ``column`` (e.g. the EIA files' ``avg_CI``) times ``scale`` (its unit's). Empty cells
    are holes. A time without a UTC offset is in ``zone`` (an IANA name: the config's
    ``zone_key``), or UTC where the column's name says so, else refused: a grid's local
    hours read as UTC shift a solar grid's day by hours, without a sign.

    Rows finer than an hour are averaged into their hour (a grid's 30 min series: the
    last row alone would stand for the whole hour). Two rows at the same instant are
    refused: the file was concatenated twice or exported wrongly, and which is right
    cannot be told. Every value must lie in ``allowed`` (inclusive): the caller knows
    what the column holds, so it passes the range (``PUE_RANGE``, ``INTENSITY_RANGE``)."""
    p = Path(path)
    try:
        f = p.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise CarbonDataError(f"{p}: cannot read ({exc.strerror}); check the path") from exc
    lo, hi = allowed
    sums: dict[int, list[float]] = {}  # hour -> [sum, rows]
    seen: dict[float, tuple[int, str]] = {}  # instant -> its line (and BA), to name a repeat
    local = ZoneInfo(zone) if zone else None
    with f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        found = time_column(list(fields))
        if found is None or column not in fields:
            raise CarbonDataError(
                f"{p}: needs a time column ('timestamp', or one whose name says UTC such as "
                f"'Datetime (UTC)') and {column!r}; it has {', '.join(fields) or 'none'}")
        name, utc, shift = found
        naive: set[datetime] = set()
        for line, row in enumerate(reader, start=2):
            text = (row[column] or "").strip()
            if not text:
                continue
            when = _instant(p, line, name, row[name].strip(), utc, local, zone_key, naive)
            try:
                value = float(text) * scale
            except ValueError as exc:
                raise CarbonDataError(f"{p}:{line}: {column} {text!r} is not a number") from exc
            if not (math.isfinite(value) and lo <= value <= hi):
                bounds = f">= {lo:g}" if hi == math.inf else f"between {lo:g} and {hi:g}"
                unit = "" if scale == 1.0 else f" ({value:g} once converted)"
                raise CarbonDataError(f"{p}:{line}: {column} {text!r}{unit} must be finite "
                                      f"and {bounds}; correct the row or the column's unit")
            instant = when.timestamp()
            first, area = seen.setdefault(instant, (line, row.get(BA_COLUMN) or ""))
            if first != line:
                raise CarbonDataError(
                    f"{p}:{line}: {name} {row[name].strip()!r} is the same instant "
                    f"as line {first}: " + (
                        f"the file holds several balancing authorities ({area} and "
                        f"{row[BA_COLUMN]}): keep only the rows of your site's grid"
                        if row.get(BA_COLUMN) not in (None, area) else
                        "a file concatenated twice or a bad export? keep one row per "
                        "instant"))
            ts = int(instant) + shift
            acc = sums.setdefault(ts - ts % HOUR_S, [0.0, 0])
            acc[0] += value
            acc[1] += 1
    if not sums:
        raise CarbonDataError(f"{p}: no values in column {column!r}")
    return HourlySeries({h: total / n for h, (total, n) in sums.items()},
                        f"{p.name} ({column})")


def _instant(p: Path, line: int, name: str, raw: str, utc: bool, local: ZoneInfo | None,
             zone_key: str, naive: set[datetime]) -> datetime:
    """A row's time as an aware datetime: its own offset, else UTC where the column's name
    says so, else the declared zone (the second of a repeated local hour, when clocks go
    back, is the later instant), else refused."""
    try:
        when = parse_time(raw, name)
    except ValueError as exc:
        raise CarbonDataError(f"{p}:{line}: {name} {raw!r} {exc}") from exc
    if when.tzinfo is not None:
        return when
    if utc:
        return when.replace(tzinfo=timezone.utc)
    if local is None:
        raise CarbonDataError(
            f"{p}:{line}: {name} {raw!r} has no UTC offset and nothing says which zone the "
            f"file's times are in; write them with their offset (2022-05-01 00:00:00+00:00), "
            f"name the column after UTC ('Datetime (UTC)'), or set {zone_key} = \"UTC\" "
            "(or the file's IANA zone, e.g. \"America/Los_Angeles\")")
    repeat = when in naive
    naive.add(when)
    aware = when.replace(tzinfo=local, fold=int(repeat))
    there = aware.astimezone(timezone.utc).astimezone(local).replace(tzinfo=None)
    if there != when:  # no such local time: the hour the clocks skip when they go forward
        raise CarbonDataError(
            f"{p}:{line}: {name} {raw!r} does not exist in {local.key}: the clocks skip "
            "that hour when they go forward (daylight saving time); drop the row, or merge "
            "it into the hour before or after")
    return aware


def read_intensity_csv(path: str | Path, column: str, unit: str = "",
                       zone: str = "") -> HourlySeries:
    """A grid intensity series, converted to gCO2e/kWh and held to ``INTENSITY_RANGE``.
    Its unit is ``unit`` (``carbon.intensity_csv_unit``), else the one the column's name
    spells; one the column's name contradicts is refused. A file that declares none is
    read as g/kWh only where its values can be (``carbon_units.implausible``: kg/kWh, 0.2
    to 0.9, would give a thousandth of the CO2e; lb/MWh of a coal grid twice it)."""
    named = unit_in_name(column)
    if unit and named and G_PER_KWH[unit] != G_PER_KWH[named]:
        raise CarbonDataError(
            f"{path}: carbon.intensity_csv_unit = {unit!r} but the column's name "
            f"{column!r} says {named}; correct the one that is wrong")
    chosen = unit or named
    scale = G_PER_KWH[chosen] if chosen else 1.0
    series = read_hourly_csv(path, column, INTENSITY_RANGE, zone=zone, scale=scale)
    values = list(series.values.values())
    if not chosen:
        why = implausible(sum(values) / len(values), max(values))
        if why is not None:
            raise CarbonDataError(
                f"{path}: column {column!r} names no unit, and read as gCO2e/kWh {why}")
    said = ("read as gCO2e/kWh: neither its name nor carbon.intensity_csv_unit names a "
            "unit" if not chosen else f"{chosen}" + ("" if scale == 1.0 else
                                                      f", x {scale:g} to gCO2e/kWh")
            + (" (carbon.intensity_csv_unit)" if unit else " (from its name)"))
    return dataclasses.replace(series, source=f"{Path(path).name} ({column}; {said})")


def country_intensity(iso3: str) -> tuple[float, str]:
    """A country's grid intensity (gCO2e/kWh) and a line naming its source and year."""
    text = resources.files("fleetwatch").joinpath(
        "data/codecarbon_global_energy_mix.json").read_text("utf-8")
    table = json.loads(text)
    row = table.get(iso3.upper())
    if row is None or "carbon_intensity" not in row:
        raise CarbonDataError(f"carbon.country {iso3!r}: not an ISO 3166-1 alpha-3 code in "
                              "CodeCarbon's table (e.g. USA, FRA, DEU, GBR); or set "
                              "carbon.intensity_g_per_kwh")
    return float(row["carbon_intensity"]), (
        f"{row.get('country_name', iso3)} grid average, {row.get('year', '?')} "
        "(CodeCarbon global_energy_mix.json, Our World in Data / Ember)")


@dataclass(frozen=True)
class HourFactors:
    """One hour's factors. ``*_filled``: the series had no row for the hour (interpolated
    or from the fallback); ``*_from_fallback``: the fallback constant was used because the
    series has nothing within reach (a file that does not cover the month), which a
    report must say louder than an interpolated hour."""

    intensity_g_per_kwh: float
    pue: float
    intensity_filled: bool
    pue_filled: bool
    intensity_from_fallback: bool = False
    pue_from_fallback: bool = False


@dataclass(frozen=True)
class CarbonModel:
    """Constant or hourly intensity and PUE; ``*_fallback`` fill holes in a series."""

    intensity_fallback: float
    intensity_source: str
    pue_fallback: float
    pue_source: str
    intensity: HourlySeries | None = None
    pue: HourlySeries | None = None
    price_per_kwh: float = 0.0
    currency: str = "USD"
    # energy.timezone: the calendar whose days and months the energy page's today and this
    # month follow. The series above are hourly in UTC, as the ledger: it changes no factor.
    timezone: str = "UTC"
    # Clusters on other grids (carbon.clusters): their own models; any other cluster's
    # energy is priced with this one.
    clusters: dict[str, CarbonModel] = field(default_factory=dict)
    # Why the carbon settings were refused ("" if they were not): then every factor is
    # NaN, so CO2e (and facility kWh, cost) read as unknown, never as a wrong figure.
    problem: str = ""

    def for_cluster(self, cluster: str) -> CarbonModel:
        """The model that prices ``cluster``'s energy: its own, else this one."""
        return self.clusters.get(cluster, self)

    def hour(self, hour_ts: int) -> HourFactors:
        ci, ci_filled, ci_fallback = (self.intensity_fallback, False, False)
        if self.intensity is not None:
            v, ci_filled = self.intensity.at(hour_ts)
            ci_fallback = v is None
            ci = self.intensity_fallback if v is None else v
        pue, pue_filled, pue_fallback = (self.pue_fallback, False, False)
        if self.pue is not None:
            v, pue_filled = self.pue.at(hour_ts)
            pue_fallback = v is None
            pue = self.pue_fallback if v is None else v
        return HourFactors(ci, pue, ci_filled, pue_filled, ci_fallback, pue_fallback)

    def co2e_g(self, energy_j: float, hour_ts: int) -> float:
        f = self.hour(hour_ts)
        return energy_j / J_PER_KWH * f.pue * f.intensity_g_per_kwh

    def method(self, used: Iterable[str] | None = None) -> list[str]:
        """The method, in sentences for a report. ``used``: the clusters with energy in it
        (None: any): a cluster's table is named only where its cluster is one of them (a
        misspelt table priced nothing)."""
        keep = None if used is None else set(used)
        tables = {n: m for n, m in self.clusters.items() if keep is None or n in keep}
        others = " (clusters without their own, below)" if tables else ""
        return [
            "CO2e = IT energy x PUE x grid carbon intensity, location-based "
            "(GHG Protocol Scope 2 guidance, location-based method).",
            f"Grid intensity{others}: {self.intensity_source}.",
            f"PUE{others}: {self.pue_source}.",
            *(f"Cluster {name}: grid intensity {m.intensity_source}; PUE {m.pue_source} "
              "(carbon.clusters)." for name, m in sorted(tables.items())),
            "Each hour of the ledger takes its own hour's intensity and PUE; a missing hour "
            f"of a series is interpolated between neighbours up to {MAX_INTERPOLATE_H} h "
            "apart, else the fallback is used, and such hours are counted below.",
            f"Cost: facility kWh x {self.price_per_kwh:g} {self.currency}/kWh.",
        ]


def build_model(country: str, intensity_g_per_kwh: float, intensity_csv: str,
                intensity_column: str, pue: float, pue_csv: str, pue_column: str,
                price_per_kwh: float, currency: str, *, intensity_unit: str = "",
                intensity_zone: str = "", pue_zone: str = "") -> CarbonModel:
    """The model the config describes: a site constant, else the country default;
    an hourly CSV on top when given (the constant fills its holes)."""
    if intensity_g_per_kwh > 0:
        fallback, source = intensity_g_per_kwh, f"{intensity_g_per_kwh:g} gCO2e/kWh (site constant)"
    else:
        fallback, source = country_intensity(country)
        source = f"{fallback:g} gCO2e/kWh, {source}"
    series = read_intensity_csv(intensity_csv, intensity_column, intensity_unit,
                                intensity_zone) if intensity_csv else None
    if series is not None:
        source = f"hourly series {series.source}; holes filled with {source}"
    pue_series = read_hourly_csv(pue_csv, pue_column, PUE_RANGE, zone=pue_zone,
                                 zone_key="carbon.pue_csv_timezone") if pue_csv else None
    pue_source = f"{pue:g} (constant)" if pue_series is None else (
        f"hourly series {pue_series.source}; holes filled with {pue:g}")
    return CarbonModel(fallback, source, pue, pue_source, series, pue_series,
                       price_per_kwh, currency)


def model_from_config(carbon: CarbonConfig, energy: EnergyConfig) -> CarbonModel:
    """The configured model, with a model of its own for each of ``carbon.clusters``; a
    wrong file or country, or an intensity in another unit (``config_rules.carbon_problems``),
    raises ``CarbonDataError`` naming it (and the cluster)."""
    problems = carbon_problems(carbon)
    if problems:
        raise CarbonDataError("; ".join(problems))
    clusters = {}
    for name, c in carbon.clusters.items():
        try:
            clusters[name] = model_from_config(c, energy)
        except CarbonDataError as exc:
            raise CarbonDataError(f"[carbon.clusters.{name}]: {exc}") from exc
    model = build_model(carbon.country, carbon.intensity_g_per_kwh, carbon.intensity_csv,
                        carbon.intensity_column, carbon.pue, carbon.pue_csv,
                        carbon.pue_column, energy.price_per_kwh, energy.currency,
                        intensity_unit=carbon.intensity_csv_unit,
                        intensity_zone=carbon.intensity_csv_timezone,
                        pue_zone=carbon.pue_csv_timezone)
    return dataclasses.replace(model, clusters=clusters, timezone=energy.timezone)


def unknown_model(problem: str, energy: EnergyConfig) -> CarbonModel:
    """The model of refused carbon settings: every factor unknown (NaN), ``problem`` said."""
    why = f"unknown: the carbon settings are refused ({problem})"
    return CarbonModel(math.nan, why, math.nan, why, price_per_kwh=energy.price_per_kwh,
                       currency=energy.currency, timezone=energy.timezone, problem=problem)


def model_or_unknown(carbon: CarbonConfig, energy: EnergyConfig) -> CarbonModel:
    """``model_from_config``, or, where it refuses, ``unknown_model`` with the refusal logged
    as an error: what a long-running command (``up``, ``dashboard``) serves, so that a
    carbon setting does not stop alerting or the other pages."""
    try:
        return model_from_config(carbon, energy)
    except CarbonDataError as exc:
        log.error("carbon settings refused, the energy page shows no CO2e until they are "
                  "fixed: %s", exc)
        return unknown_model(str(exc), energy)
