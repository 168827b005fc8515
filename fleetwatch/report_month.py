"""The report's month: which month a flag names, its span, and the projection to its end."""

from __future__ import annotations

import calendar
from collections.abc import Iterable
from datetime import datetime, timezone

from fleetwatch.pipeline.store.ledger import EnergyRow

DAY_S = 86_400


class ReportError(ValueError):
    """The report cannot be made as asked (a bad month, an empty store)."""


# A projection needs data for at least this share of the time since the data began: a
# rate from 3 hours stretched over a week of silence says nothing about the month.
MIN_PROJECTION_COVERAGE = 0.5


def month_projection(so_far: float, hours: Iterable[int], first_ts: float, now: float,
                     start_ts: float, end_ts: float) -> tuple[float | None, str]:
    """(a month's total if the rest of it goes at the rate of its hours with data, why
    there is none): what the dashboard and the report both show. ``hours``: the ledger
    hours with data; ``first_ts``: when the data began (:func:`data_began`). Hours
    without data are not time at zero use: a silent fleet is unknown, and spreading the
    energy over them understates the rate. The oldest hour counts from when the data
    began (from its start, the rate reads threefold low when the data began at minute
    40), the current hour up to now. Withheld when under ``MIN_PROJECTION_COVERAGE`` of
    the time since the data began has data, and when data is stamped after ``now`` (a
    node's clock runs ahead, or the report's lags): no rate of time covered holds it."""
    month = {h for h in hours if start_ts <= h < end_ts}
    ahead = sum(1 for h in month if h >= now)
    if ahead or (month and first_ts > now):
        return None, (f"{max(ahead, 1):,} h of data is stamped after now "
                      f"({_utc(now)}): a node's clock runs ahead (or this one lags); "
                      "fix the clock")
    hours = sorted(month)
    if not hours:
        return None, "no data this month"
    began = max(start_ts, first_ts, hours[0])
    covered = max(1.0, sum(max(0.0, min(h + 3600, now) - max(h, began)) for h in hours))
    since = max(1.0, now - began)
    if covered < MIN_PROJECTION_COVERAGE * since:
        return None, (f"only {covered / 3600:,.1f} h of the {since / 3600:,.1f} h since the "
                      "data began have data")
    return so_far + so_far / covered * max(0.0, end_ts - now), ""


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def data_began(rows: Iterable[EnergyRow], now: float, bucket_s: int = 3600) -> float | None:
    """When the data of the oldest hour among ``rows`` began: the end of that hour (now,
    while it runs) less the longest time one device was followed in it (measured or
    missing time, over its rows of the hour). None without rows."""
    by_hour: dict[int, dict[tuple[str, str, str], float]] = {}
    for r in rows:
        devices = by_hour.setdefault(r.bucket_ts, {})
        key = (r.cluster, r.node, r.device)
        devices[key] = devices.get(key, 0.0) + r.seconds + r.missing_s
    if not by_hour:
        return None
    first = min(by_hour)
    followed = min(float(bucket_s), max(by_hour[first].values()))
    return max(float(first), min(first + bucket_s, now) - followed)


def resolve_month(month: str, now: float) -> str:
    """``previous`` and ``current`` (UTC months, as the ledger's) as ``YYYY-MM``; any other
    text is returned as it is, for :func:`month_span` to check."""
    if month not in ("previous", "current"):
        return month
    today = datetime.fromtimestamp(now, timezone.utc)
    year, mon = today.year, today.month
    if month == "previous":
        year, mon = (year - 1, 12) if mon == 1 else (year, mon - 1)
    return f"{year:04d}-{mon:02d}"


def month_span(month: str) -> tuple[int, int]:
    """``2026-11`` -> (start, end) in epoch seconds, UTC."""
    try:
        year, mon = (int(x) for x in month.split("-"))
        if not (1 <= mon <= 12 and 2000 <= year <= 2200) or len(month) != 7:
            raise ValueError
    except ValueError:
        raise ReportError(f"--month {month!r}: expected YYYY-MM (e.g. 2026-11), previous or "
                          "current") from None
    start = calendar.timegm((year, mon, 1, 0, 0, 0))
    days = calendar.monthrange(year, mon)[1]
    return start, start + days * DAY_S
