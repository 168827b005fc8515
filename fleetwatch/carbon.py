"""Carbon: CO2e = energy x PUE x grid intensity, location-based (GHG Protocol scope 2).

Conventions (the same as CodeCarbon's, stated in every report):

* energy is the IT energy the ledger holds (GPUs, CPUs, the rest of the node),
  in kWh; the facility's overhead (cooling, power distribution) is added by
  the PUE: facility kWh = IT kWh x PUE;
* the grid intensity is location-based: the average emission factor of the
  grid the site draws from, in gCO2e per kWh, never a market-based figure
  (certificates, PPAs); market-based reporting needs the supplier's factors;
* intensity and PUE are hourly when a series is configured (each ledger hour
  takes its own hour's factor), else constants; a missing hour in a series is
  filled by linear interpolation between its neighbours (up to
  ``MAX_INTERPOLATE_H`` hours apart), else by the fallback constant, and the
  report says how many hours were filled;
* without a site figure, the country default comes from CodeCarbon's
  ``global_energy_mix.json`` (Our World in Data / Ember, MIT licence), shipped
  in ``fleetwatch/data``.

Pure: files are read by ``read_hourly_csv`` and ``country_intensity``; the
model itself is numbers.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

from fleetwatch.config import CarbonConfig, ConfigError, EnergyConfig

J_PER_KWH = 3.6e6
MAX_INTERPOLATE_H = 6
HOUR_S = 3600


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


def read_hourly_csv(path: str | Path, column: str) -> HourlySeries:
    """An hourly series from a CSV with a ``timestamp`` column (ISO 8601; UTC if no
    offset) and ``column`` (e.g. the EIA files' ``avg_CI``). Empty cells are holes."""
    p = Path(path)
    try:
        f = p.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise CarbonDataError(f"{p}: cannot read ({exc.strerror}); check the path") from exc
    values: dict[int, float] = {}
    with f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        if "timestamp" not in fields or column not in fields:
            raise CarbonDataError(f"{p}: needs columns 'timestamp' and {column!r}; it has "
                                  f"{', '.join(fields) or 'none'}")
        for line, row in enumerate(reader, start=2):
            text = (row[column] or "").strip()
            if not text:
                continue
            try:
                when = datetime.fromisoformat(row["timestamp"].strip())
            except ValueError as exc:
                raise CarbonDataError(f"{p}:{line}: timestamp {row['timestamp']!r} is not "
                                      "ISO 8601 (e.g. 2022-01-01 00:00:00+00:00)") from exc
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            try:
                value = float(text)
            except ValueError as exc:
                raise CarbonDataError(f"{p}:{line}: {column} {text!r} is not a number") from exc
            if not math.isfinite(value) or value < 0:
                raise CarbonDataError(f"{p}:{line}: {column} {text!r} must be finite and >= 0")
            ts = int(when.timestamp())
            values[ts - ts % HOUR_S] = value
    if not values:
        raise CarbonDataError(f"{p}: no values in column {column!r}")
    return HourlySeries(values, f"{p.name} ({column})")


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
    intensity_g_per_kwh: float
    pue: float
    intensity_filled: bool
    pue_filled: bool


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

    def hour(self, hour_ts: int) -> HourFactors:
        ci, ci_filled = (self.intensity_fallback, False)
        if self.intensity is not None:
            v, ci_filled = self.intensity.at(hour_ts)
            ci = self.intensity_fallback if v is None else v
        pue, pue_filled = (self.pue_fallback, False)
        if self.pue is not None:
            v, pue_filled = self.pue.at(hour_ts)
            pue = self.pue_fallback if v is None else v
        return HourFactors(ci, pue, ci_filled, pue_filled)

    def co2e_g(self, energy_j: float, hour_ts: int) -> float:
        f = self.hour(hour_ts)
        return energy_j / J_PER_KWH * f.pue * f.intensity_g_per_kwh

    def method(self) -> list[str]:
        """The method, in sentences for a report."""
        return [
            "CO2e = IT energy x PUE x grid carbon intensity, location-based "
            "(GHG Protocol Scope 2 guidance, location-based method).",
            f"Grid intensity: {self.intensity_source}.",
            f"PUE: {self.pue_source}.",
            "Each hour of the ledger takes its own hour's intensity and PUE; a missing hour "
            f"of a series is interpolated between neighbours up to {MAX_INTERPOLATE_H} h "
            "apart, else the fallback is used, and such hours are counted below.",
            f"Cost: facility kWh x {self.price_per_kwh:g} {self.currency}/kWh.",
        ]


def build_model(country: str, intensity_g_per_kwh: float, intensity_csv: str,
                intensity_column: str, pue: float, pue_csv: str, pue_column: str,
                price_per_kwh: float, currency: str) -> CarbonModel:
    """The model the config describes: a site constant, else the country default;
    an hourly CSV on top when given (the constant fills its holes)."""
    if intensity_g_per_kwh > 0:
        fallback, source = intensity_g_per_kwh, f"{intensity_g_per_kwh:g} gCO2e/kWh (site constant)"
    else:
        fallback, source = country_intensity(country)
        source = f"{fallback:g} gCO2e/kWh, {source}"
    series = read_hourly_csv(intensity_csv, intensity_column) if intensity_csv else None
    if series is not None:
        source = f"hourly series {series.source}; holes filled with {source}"
    pue_series = read_hourly_csv(pue_csv, pue_column) if pue_csv else None
    pue_source = f"{pue:g} (constant)" if pue_series is None else (
        f"hourly series {pue_series.source}; holes filled with {pue:g}")
    return CarbonModel(fallback, source, pue, pue_source, series, pue_series,
                       price_per_kwh, currency)


def model_from_config(carbon: CarbonConfig, energy: EnergyConfig) -> CarbonModel:
    """The configured model; a wrong file or country raises ``CarbonDataError`` naming it."""
    return build_model(carbon.country, carbon.intensity_g_per_kwh, carbon.intensity_csv,
                       carbon.intensity_column, carbon.pue, carbon.pue_csv, carbon.pue_column,
                       energy.price_per_kwh, energy.currency)
