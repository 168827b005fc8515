"""The cells of a recorded file (``fleetwatch.recorded``): times (epoch seconds or ISO 8601,
and when a zone-less time is one at which clocks fall back), values in the catalogue's
unit checked against its range, and XID codes."""

from __future__ import annotations

import functools
import math
import time
from datetime import datetime, timezone

from fleetwatch.catalogue import Metric, catalogue

XID = "xid"
# dcgm-exporter's (and AcmeTrace's) XID field: the last XID seen, not an event.
XID_LAST = "DCGM_FI_DEV_XID_ERRORS"
XID_FIELDS = ("XID_ERRORS", XID_LAST)
XID_MAX = 65535  # the driver's codes, as fleetwatch/xids.csv is checked: 1..65535

# DCGM's ratios (SM, tensor, DRAM activity) are quotients of counters read a moment apart
# and come out a little above 1 now and then (NVIDIA/DCGM#152): up to this much above
# their maximum is read as the maximum, counted and said; more is no reading (a bad row),
# in every layout alike. The same amount tells an AcmeTrace file in percent (_scale).
RATIO_OVERSHOOT = 0.05

BACK_HOUR = (3000.0, 4200.0)  # a step back of a series' time read as a DST change (s)
# Where clocks fall back, as local times written without a zone show it: in the night
# (US 02:00 -> 01:00, EU and Australia 03:00 -> 02:00, Chile 24:00 -> 23:00, so the
# local time before the change is 23:00 to 03:59), in September to November (north) or
# February to April (south: Australia, New Zealand, Chile, Brazil until 2019).
FALL_BACK_HOURS = frozenset({23, 0, 1, 2, 3})
FALL_BACK_MONTHS = frozenset({2, 3, 4, 9, 10, 11})


def fall_back(local: float) -> bool:
    """Whether a zone-less time (read as UTC) is one at which clocks fall back somewhere."""
    t = time.gmtime(local)
    return t.tm_hour in FALL_BACK_HOURS and t.tm_mon in FALL_BACK_MONTHS


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def parse_time(text: str) -> float:
    """Epoch seconds, or ISO 8601 (no zone: UTC)."""
    return _parse_time(text)[0]


def _parse_time(text: str) -> tuple[float, bool]:
    """The time, and whether it was written without a zone (ISO 8601 read as UTC)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"time {text!r} is neither epoch seconds nor ISO 8601") from None
        if dt.tzinfo is None:
            return dt.replace(tzinfo=timezone.utc).timestamp(), True
        return dt.timestamp(), False
    if not math.isfinite(value) or not 0 <= value < 1e11:
        raise ValueError(f"time {text!r} is not a plausible epoch time in seconds")
    return value, False


def _value(text: str, metric: str, factor: float = 1.0,
           seen: dict[str, int] | None = None) -> float:
    """The value in our unit (``factor`` times the text's), checked against the catalogue.

    A ratio up to ``RATIO_OVERSHOOT`` above its maximum is read as the maximum, and
    counted in ``seen`` (metric -> samples) for the summary."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"value {text!r} of {metric} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"value {text!r} of {metric} is not finite")
    value *= factor
    if metric not in (XID, XID_LAST):
        m = _metric(metric)
        if m.unit == "ratio" and m.max < value <= m.max + RATIO_OVERSHOOT:
            if seen is not None:
                seen[metric] = seen.get(metric, 0) + 1
            return m.max
        if not m.min <= value <= m.max:
            raise ValueError(f"{metric} = {value:g} is outside its possible range "
                             f"{m.min:g}..{m.max:g} {m.unit}")
    return value


def xid_code(text: str, zero: bool = False) -> int:
    """An XID code: a whole number 1..65535 (``zero``: 0 too, AcmeTrace's "none").

    ``79.0`` is 79 (exports write floats); ``79.9``, ``-5`` or ``0`` is no code the
    driver sends, and is refused rather than truncated into one.
    """
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"XID {text!r} is not a number") from None
    low = 0 if zero else 1
    if not (math.isfinite(value) and value.is_integer() and low <= value <= XID_MAX):
        raise ValueError(f"XID {text.strip()!r} is not a whole number {low}..{XID_MAX} "
                         "(the driver's XID code)")
    return int(value)


@functools.cache
def _metric(name: str) -> Metric:
    return catalogue()[name]
