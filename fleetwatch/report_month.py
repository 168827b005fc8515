"""The report's month: which month a flag names, its span, and the projection to its end."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from fleetwatch.pipeline.store.ledger import EnergyRow

DAY_S = 86_400


class ReportError(ValueError):
    """The report cannot be made as asked (a bad month, an empty store)."""


class NothingToReport(ReportError):
    """The ledger begins after the month asked for (fleetwatch was installed since): no
    failure, nothing to do; ``fleetwatch report`` exits 0 saying so."""


class ZoneError(ReportError):
    """A time zone name zoneinfo does not know: a usage error (exit 2)."""


# A projection needs data for at least this share of the time since the data began: a
# rate from 3 hours stretched over a week of silence says nothing about the month.
MIN_PROJECTION_COVERAGE = 0.5


class HourData(NamedTuple):
    """What the ledger says of one hour (of the fleet, or of one cluster): the GPU-seconds
    measured and missing, the energy of every device, and the longest time one device
    was measured in it (None: not read)."""

    bucket_ts: int
    gpu_s: float
    missing_s: float
    energy_j: float
    longest_s: float | None = None


def measured_hours(hours: Iterable[HourData], began: float, now: float,
                   bucket_s: int = 3600) -> dict[int, float]:
    """The hours with measured data -> the seconds of each that were measured: what
    "hours with data" counts and what the projection's rate divides by (the report and
    the dashboard both). An hour whose rows hold only missing time (every node silent) is
    not an hour with data. An hour's time runs from when the data began (``began``, in
    the oldest hour) up to now; of it counts the share of its GPU time that was measured,
    and at most the longest time one device was measured in it (data that came back at
    minute 30 after a silence the ledger did not book as missing)."""
    acc: dict[int, list[float]] = {}
    longest: dict[int, float] = {}
    for h in hours:
        a = acc.setdefault(h.bucket_ts, [0.0, 0.0, 0.0])
        a[0] += h.gpu_s
        a[1] += h.missing_s
        a[2] += h.energy_j
        if h.longest_s is not None:
            longest[h.bucket_ts] = max(longest.get(h.bucket_ts, 0.0), h.longest_s)
    out: dict[int, float] = {}
    for h, (gpu, missing, energy) in acc.items():
        if gpu <= 0 and energy <= 0:
            continue  # only missing time: unknown, not an hour with data
        share = gpu / (gpu + missing) if gpu > 0 else 1.0  # a node without GPUs
        seconds = max(0.0, min(h + bucket_s, now) - max(h, began)) * share
        out[h] = min(seconds, longest.get(h, seconds))
    return out


def longest_measured(rows: Iterable[EnergyRow]) -> dict[int, float]:
    """Per hour among ``rows``, the longest time one device was measured in it (its rows
    of the hour summed: one per job it ran): :attr:`HourData.longest_s`."""
    device_s: dict[tuple[int, str, str, str], float] = {}
    for r in rows:
        key = (r.bucket_ts, r.cluster, r.node, r.device)
        device_s[key] = device_s.get(key, 0.0) + r.seconds + r.gap_s  # a gap's: measured
    out: dict[int, float] = {}
    for (h, *_), sec in device_s.items():
        out[h] = max(out.get(h, 0.0), sec)
    return out


def month_projection(so_far: float, hours: Iterable[HourData], first_ts: float, now: float,
                     start_ts: float, end_ts: float) -> tuple[float | None, str]:
    """(a month's total if the rest of it goes at the rate of its measured time, why
    there is none): what the dashboard and the report both show. ``hours``: the ledger's
    hours; ``first_ts``: when the data began (:func:`data_began`). Time without data is
    not time at zero use: a silent fleet is unknown, and spreading the energy over it
    understates the rate. The time covered is :func:`measured_hours`' (the oldest hour
    from when the data began, the current one up to now, an hour of only missing time
    none). Withheld when under ``MIN_PROJECTION_COVERAGE`` of the time since the data
    began has data, and when data is stamped after ``now`` (a node's clock runs ahead,
    or the report's lags): no rate of time covered holds it."""
    # Hours that overlap the month: in a zone with a half-hour offset (Asia/Kolkata) the
    # month begins and ends inside a UTC hour, whose time measured_hours clips to it.
    month = [h for h in hours if start_ts - 3600 < h.bucket_ts < end_ts]
    stamped = {h.bucket_ts for h in month}
    ahead = sum(1 for h in stamped if h >= now)
    if ahead or (stamped and first_ts > now):
        return None, (f"{max(ahead, 1):,} h of data is stamped after now "
                      f"({_utc(now)}): a node's clock runs ahead (or this one lags); "
                      "fix the clock")
    measured = measured_hours(month, max(start_ts, first_ts), now)
    if not measured:
        return None, "no data this month"
    began = max(start_ts, first_ts, min(measured))
    covered = max(1.0, sum(measured.values()))
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
        devices[key] = devices.get(key, 0.0) + r.seconds + r.missing_s + r.gap_s
    if not by_hour:
        return None
    first = min(by_hour)
    followed = min(float(bucket_s), max(by_hour[first].values()))
    return max(float(first), min(first + bucket_s, now) - followed)


def zone_name(name: str) -> str:
    """``name`` as the time zone database spells it: as given where it has it, else the
    one name it has that differs only in case (``utc`` -> ``UTC``, ``europe/berlin``); a
    name it does not have, or two it has in different cases, raises ``ZoneError``."""
    try:
        ZoneInfo(name)
        return name
    except (ZoneInfoNotFoundError, ValueError):
        pass
    same = [z for z in available_timezones() if z.casefold() == name.casefold()]
    if len(same) == 1:
        return same[0]
    raise ZoneError(f"time zone {name!r} is not an IANA time zone name (e.g. UTC, "
                    "Europe/Berlin, Asia/Tokyo, America/New_York); see `timedatectl "
                    "list-timezones`, or install tzdata")


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``, ``UTC``, in any case where only
    one name matches: ``zone_name``); a name the system's time zone database does not have
    raises ``ZoneError`` saying so."""
    return ZoneInfo(zone_name(name))


def resolve_month(month: str, now: float, tz: str = "UTC") -> str:
    """``previous`` and ``current`` (the months of ``tz``'s calendar) as ``YYYY-MM``; any
    other text is returned as it is, for :func:`month_span` to check."""
    if month not in ("previous", "current"):
        return month
    today = datetime.fromtimestamp(now, zone(tz))
    year, mon = today.year, today.month
    if month == "previous":
        year, mon = (year - 1, 12) if mon == 1 else (year, mon - 1)
    return f"{year:04d}-{mon:02d}"


def month_span(month: str, tz: str = "UTC") -> tuple[int, int]:
    """``2026-11`` -> (start, end) in epoch seconds: the local midnights of ``tz`` that
    begin the month and the next one (Europe/Berlin's March starts at 23:00 UTC on the
    28th of February and has 743 hours; Asia/Kolkata's months begin at 18:30 UTC)."""
    try:
        year, mon = (int(x) for x in month.split("-"))
        if not (1 <= mon <= 12 and 2000 <= year <= 2200) or len(month) != 7:
            raise ValueError
    except ValueError:
        raise ReportError(f"--month {month!r}: expected YYYY-MM (e.g. 2026-11), previous or "
                          "current") from None
    z = zone(tz)
    nyear, nmon = (year + 1, 1) if mon == 12 else (year, mon + 1)
    return (int(datetime(year, mon, 1, tzinfo=z).timestamp()),
            int(datetime(nyear, nmon, 1, tzinfo=z).timestamp()))


def month_of(now: float, tz: str = "UTC") -> tuple[int, int]:
    """(start, end) of the month of ``tz``'s calendar that ``now`` is in."""
    return month_span(resolve_month("current", now, tz), tz)


def day_start(ts: float, tz: str = "UTC") -> int:
    """The local midnight of ``tz`` that begins the day ``ts`` is in."""
    z = zone(tz)
    d = datetime.fromtimestamp(ts, z)
    return int(datetime(d.year, d.month, d.day, tzinfo=z).timestamp())


def hour_share(bucket_ts: int, start_ts: float, end_ts: float, bucket_s: int = 3600) -> float:
    """The share of the ledger hour ``bucket_ts`` (UTC) inside [start, end): 1 for an hour
    inside, 0.5 for the UTC hour a month of Asia/Kolkata begins or ends in. The ledger
    keeps no finer time than its hour, so that hour's energy is split by its time."""
    inside = min(bucket_ts + bucket_s, end_ts) - max(bucket_ts, start_ts)
    return max(0.0, min(1.0, inside / bucket_s))


def ledger_span(start_ts: float, end_ts: float, bucket_s: int = 3600) -> tuple[int, int]:
    """The ledger hours to read for [start, end): from the hour ``start`` is in to the
    end of the hour ``end`` falls in (whole hours, as the ledger keeps them)."""
    first = int(start_ts - start_ts % bucket_s)
    last = int(-(-end_ts // bucket_s) * bucket_s)
    return first, last


def hours_with_data(measured: Iterable[int], start_ts: float, upto_ts: float,
                    bucket_s: int = 3600) -> int:
    """How many of the month's hours up to ``upto_ts`` (counted from its start, as
    ``Report.hours_so_far`` counts them: 743 in a month that springs forward) have data:
    an hour has data when every ledger hour it overlaps does (``measured``, the UTC hours
    with data). With a whole-hour offset each of them is one ledger hour; in a zone with a
    half-hour one it is two halves, and a half without data makes it an hour without."""
    have = set(measured)
    n = 0
    t = float(start_ts)
    while t < upto_ts:
        end = min(t + bucket_s, upto_ts)
        first, last = ledger_span(t, end, bucket_s)
        if all(h in have for h in range(first, last, bucket_s)):
            n += 1
        t += bucket_s
    return n
