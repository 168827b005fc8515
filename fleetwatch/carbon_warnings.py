"""What a report and the energy page say when a configured carbon series (grid intensity,
PUE) left hours to its fallback constant, and when ``carbon.clusters`` names a cluster the
month has no energy of (a misspelt table silently prices that cluster on ``[carbon]``).
One place, so that the CLI, the dashboard and the report say the same."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timezone

from fleetwatch.carbon import HOUR_S, MAX_INTERPOLATE_H, CarbonModel, HourFactors, HourlySeries


def grid_warnings(model: CarbonModel, factors: dict[tuple[str, int], HourFactors]) -> str:
    """``series_warning`` for each grid that priced hours ("" the global one, else a
    cluster of carbon.clusters), naming a cluster's own by its key and file."""
    out = []
    for grid in sorted({g for g, _ in factors}):
        hours = sorted(h for g, h in factors if g == grid)
        fs = [factors[grid, h] for h in hours]
        text = series_warning(model.for_cluster(grid), len(fs),
                              sum(f.intensity_from_fallback for f in fs),
                              sum(f.pue_from_fallback for f in fs), hours,
                              f"carbon.clusters.{grid}." if grid else "carbon.")
        if text:
            out.append(f"cluster {grid}: {text}" if grid else text)
    return "; ".join(out)


def hours_warning(model: CarbonModel, priced: Iterable[tuple[str, int]]) -> str:
    """``grid_warnings`` of these (cluster, hour) pairs, each cluster priced with its own
    grid where carbon.clusters has one, as the report prices them: what the energy page
    shows, so that it warns of what the report warns of."""
    factors: dict[tuple[str, int], HourFactors] = {}
    for cluster, h in priced:
        grid = cluster if cluster in model.clusters else ""
        if (grid, h) not in factors:
            factors[grid, h] = model.for_cluster(grid).hour(h)
    return grid_warnings(model, factors)





def series_warning(model: CarbonModel, hours: int, ci: int, pue: int,
                   priced: Iterable[int] = (), key: str = "carbon.") -> str:
    """What to tell the reader when a configured series left hours to the fallback: the
    hours outside the series' span (a file that does not cover them), and the holes
    inside it too long to interpolate, each named. ``priced``: the hours the report
    priced (without them, every fallback hour is said to be outside the span). ``key``:
    the table the series is configured in (``carbon.``, ``carbon.clusters.NAME.``); a
    cluster's own file is named too."""
    priced = list(priced)
    out = []
    if ci and model.intensity is not None:
        out.append(f"{ci:,} of {hours:,} hours use the fallback intensity "
                   f"{model.intensity_fallback:g} gCO2e/kWh: "
                   + _why_fallback(model.intensity, priced, ", not these hours")
                   + _key(key, "intensity_csv", model.intensity))
    if pue and model.pue is not None:
        out.append(f"{pue:,} of {hours:,} hours use the fallback PUE {model.pue_fallback:g}: "
                   + _why_fallback(model.pue, priced, "") + _key(key, "pue_csv", model.pue))
    return "; ".join(out)


def _key(table: str, name: str, series: HourlySeries) -> str:
    """The setting a warning is about: ``(carbon.intensity_csv)``, or for a cluster's own
    grid its key and file, ``(carbon.clusters.c-tx.intensity_csv, ercot.csv)``."""
    if table == "carbon.":
        return f" ({table}{name})"
    return f" ({table}{name}, {series.source.split(' (')[0]})"


def _at(ts: int) -> str:
    return f"{datetime.fromtimestamp(ts, timezone.utc):%Y-%m-%d %H:00}"


def _why_fallback(series: HourlySeries, priced: Sequence[int], not_these: str,
                  most: int = 3) -> str:
    """Why ``series`` left hours of ``priced`` to the fallback: outside its span, or in a
    hole inside it wider than interpolation bridges (the hole's first and last missing
    hour and its length)."""
    first, last = series.span()
    covers = f"the hourly series covers {_at(first)} to {_at(last)} UTC"
    fallback = [h for h in priced if series.at(h)[0] is None]
    inside = [h for h in fallback if first <= h <= last]
    holes: dict[int, int] = {}  # first missing hour -> last missing hour
    for h in inside:
        if any(a <= h <= b for a, b in holes.items()):
            continue
        a, b = h, h
        while a - HOUR_S not in series.values:
            a -= HOUR_S
        while b + HOUR_S not in series.values:
            b += HOUR_S
        holes[a] = b
    if not holes:
        return covers + not_these
    named = [f"{_at(a)} to {_at(b)} UTC ({(b - a) // HOUR_S + 1:,} hours missing)"
             for a, b in sorted(holes.items())[:most]]
    if len(holes) > most:
        named.append(f"{len(holes) - most:,} more")
    what = "a hole" if len(holes) == 1 else f"{len(holes):,} holes"
    text = (f"the hourly series has {what} longer than interpolation bridges (neighbours "
            f"up to {MAX_INTERPOLATE_H} h apart): {'; '.join(named)}")
    outside = len(fallback) - len(inside)
    if outside:
        text += f"; {outside:,} hours are outside it: {covers}"
    return text


def clusters_warning(model: CarbonModel, clusters: Iterable[str]) -> str:
    """A ``[carbon.clusters.NAME]`` table that matches none of ``clusters`` (those with
    energy in what is priced): a misspelt name prices its cluster on ``[carbon]`` without
    a word; said, with the clusters that fell back to ``[carbon]``. "" when every table
    matches a cluster (or there are none)."""
    seen = sorted(set(clusters))
    unused = sorted(set(model.clusters) - set(seen))
    if not unused or not seen:
        return ""
    fell = [c for c in seen if c not in model.clusters]
    tables = ", ".join(f"[carbon.clusters.{n}]" for n in unused)
    return (f"{tables} match{'es' if len(unused) == 1 else ''} no cluster with energy here "
            f"(clusters: {', '.join(seen)}): a misspelt name? "
            + (f"Priced with [carbon]: {', '.join(fell)}" if fell else
               "Every cluster has a table of its own"))
