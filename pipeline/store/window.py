"""The span of timestamps a server keeps, so that nothing is sent that it would drop.

VictoriaMetrics answers 204 to a write and then drops, counting them only
in ``vm_rows_ignored_total``, the rows older than ``now - retentionPeriod``
or newer than ``now + 2 days`` (``lib/storage/table.go``,
``getMinMaxTimestamps``; the future bound is fixed in the code). InfluxDB
drops points older than its retention policy's duration with a "partial
write" answer. The codec admits frames from 2000 to 2100, so both happen.
A frame is checked against the window before anything is sent, with a
margin for the two clocks and for the boundary moving on while the batch
travels: ``MARGIN_MS``, or a tenth of the span on that side when that is less
(``margin_ms``), so that a short retention (InfluxDB's shortest is 1 h) keeps
nine tenths of what the server keeps rather than nothing. The frames outside are
refused by name (``StoreRejected(indices=...)``) and the processor dead-letters
them. A window too short to hold live frames (``MIN_RETENTION_MS``) is a
configuration error, said at start (``too_short``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from fleetwatch.frame import Frame

MARGIN_MS = 3_600_000
# The margin is at most this fraction of the span it narrows (see ``margin_ms``).
MARGIN_FRACTION = 0.1
# A retention shorter than this cannot hold a processor's batches through a short store
# outage: refused at start (``AcceptWindow.too_short``).
MIN_RETENTION_MS = 600_000
DAY_MS = 86_400_000
# VictoriaMetrics' flag units (lib/flagutil/duration.go): a bare number is months of 31 days.
_VM_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": DAY_MS,
                "w": 7 * DAY_MS, "M": 31 * DAY_MS, "y": 365 * DAY_MS}
# Go's time.Duration text as InfluxDB prints it: "168h0m0s", "0s".
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1, "s": 1000, "m": 60_000,
                "h": 3_600_000}


@dataclass(frozen=True, slots=True)
class AcceptWindow:
    """Timestamps in [now - retention, now + future] are kept; None: no bound that side."""

    retention_ms: int | None
    future_ms: int | None
    source: str  # where the bounds come from, for the refusal's reason

    def bounds(self, now_ms: int) -> tuple[int | None, int | None]:
        low = (None if self.retention_ms is None else
               now_ms - self.retention_ms + margin_ms(self.retention_ms))
        high = (None if self.future_ms is None else
                now_ms + self.future_ms - margin_ms(self.future_ms))
        return low, high

    def too_short(self) -> str | None:
        """Why this window cannot hold live frames, if it cannot: a retention shorter than
        ``MIN_RETENTION_MS`` (what the processor refuses to start with)."""
        if self.retention_ms is None or self.retention_ms >= MIN_RETENTION_MS:
            return None
        return (f"the store keeps only {self.retention_ms / 1000:.0f} s of data "
                f"({self.source}); fleetwatch needs at least {MIN_RETENTION_MS // 60_000} min "
                "to store live frames through a short outage. Lengthen the retention policy "
                "(ALTER RETENTION POLICY ... DURATION 1d) or use another database")

    def refused(self, frames: Sequence[Frame], now_ms: int | None = None) -> list[int]:
        """Positions of the frames whose time the server would drop."""
        low, high = self.bounds(int(time.time() * 1000) if now_ms is None else now_ms)
        out = []
        for i, f in enumerate(frames):
            ts = f.ts * 1000
            if (low is not None and ts < low) or (high is not None and ts > high):
                out.append(i)
        return out

    def reason(self, frames: Sequence[Frame], refused: Sequence[int],
               now_ms: int | None = None) -> str:
        """Why the frames at ``refused`` are refused: one text for them all, naming none
        (the processor names each dead letter's own frame and time)."""
        low, high = self.bounds(int(time.time() * 1000) if now_ms is None else now_ms)
        span = f"from {_iso(low) if low is not None else 'any time'} to " \
               f"{_iso(high) if high is not None else 'any time'}"
        return (f"{len(refused)} frame(s) of {len(frames)} in the batch outside the times "
                f"the store keeps ({self.source}: {span}); the server would drop them "
                "silently. Fix the agent's clock, or widen the server's retention")


def margin_ms(span_ms: int) -> int:
    """The safety margin inside a bound ``span_ms`` from now: ``MARGIN_MS``, or a tenth of
    the span when that is less, so that the window is never empty."""
    return min(MARGIN_MS, int(span_ms * MARGIN_FRACTION))


def _iso(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def vm_duration_ms(text: str) -> int:
    """A VictoriaMetrics duration flag (``-retentionPeriod``) in ms: ``100y``, ``2w``, ``1``
    (months), ``30d``."""
    text = text.strip().strip('"')
    try:
        return int(float(text) * _VM_UNITS_MS["M"])
    except ValueError:
        pass
    for unit in sorted(_VM_UNITS_MS, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * _VM_UNITS_MS[unit])
    raise ValueError(f"cannot read the duration {text!r}")


def go_duration_ms(text: str) -> int:
    """Go's ``time.Duration`` text (InfluxDB's retention policy duration) in ms."""
    parts = _GO_PART.findall(text)
    if not parts and text not in ("0", ""):
        raise ValueError(f"cannot read the duration {text!r}")
    return int(sum(float(n) * _GO_UNITS_MS[u] for n, u in parts))


# InfluxQL reads a time literal as int64 nanoseconds: past this many ms either side of 1970
# (the year 2262) it refuses the whole query ("invalid duration", "overflowed duration").
INFLUXQL_LIMIT_MS = 9_223_372_036_854


def influxql_ms(ms: float) -> int:
    """A time in ms as an InfluxQL time literal takes it (``time < {influxql_ms(x)}ms``):
    rounded, and held within ``INFLUXQL_LIMIT_MS``, so that a window "with no end" (1e18 s,
    inf) reads as far as the server goes rather than being refused."""
    return round(max(-INFLUXQL_LIMIT_MS, min(INFLUXQL_LIMIT_MS, ms)))


def parse_flags(text: str) -> dict[str, str]:
    """VictoriaMetrics' ``/flags`` page (``-name="value"`` a line) as a dict."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name.startswith("-"):
            out[name[1:]] = value.strip().strip('"')
    return out
