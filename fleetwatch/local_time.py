"""A wall-clock time typed on the command line, read in a time zone: one parser for every
flag that takes one (``silence add --start/--until``, ``timeline --since/--until``), so that
a time a zone skips or has twice at a summer-time change is refused the same way by each."""

from __future__ import annotations

from datetime import datetime, timezone, tzinfo


class LocalTimeError(ValueError):
    """A typed time that names no one instant; the message says which and what to write."""


def moment(text: str, flag: str, tz: tzinfo, unreadable: str = "") -> float:
    """``text``, typed for ``flag``: an ISO 8601 date and time, in ``tz`` unless it carries
    its offset (``local_instant``). ``unreadable``: what to say of text that is no date and
    time (default: that, with an example)."""
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise LocalTimeError(unreadable or f"{flag} {text!r} is not a date and time: write "
                             "e.g. 2026-11-28 02:00 (in --tz, UTC by default) or "
                             "2026-11-28T02:00:00+01:00") from None
    return at.timestamp() if at.tzinfo is not None else local_instant(at, tz, flag)


def local_instant(at: datetime, tz: tzinfo, flag: str) -> float:
    """``at``, a wall-clock time without an offset, read in ``tz``. Refused naming it: one
    the zone skips (summer time starting: zoneinfo would read it as another hour, shifting
    the window silently) and one it has twice (summer time ending: which of the two was
    meant cannot be guessed), with both readings and the offset that picks each."""
    first, second = at.replace(tzinfo=tz, fold=0), at.replace(tzinfo=tz, fold=1)
    typed = at.strftime("%Y-%m-%d %H:%M")
    back = datetime.fromtimestamp(first.timestamp(), tz).replace(tzinfo=None)
    if back != at:  # no instant shows this wall time
        gap = _gap(at, tz)
        raise LocalTimeError(f"{flag} {typed} does not exist in {tz}: the clocks go from "
                             f"{gap[0]} straight to {gap[1]} that day; write a time outside "
                             "the skipped hour, or one with its offset")
    if first.utcoffset() != second.utcoffset():
        readings = " or ".join(
            f"{a.isoformat(timespec='minutes')} "
            f"({datetime.fromtimestamp(a.timestamp(), timezone.utc):%H:%M} UTC)"
            for a in (first, second))
        raise LocalTimeError(f"{flag} {typed} happens twice in {tz} (the clocks go back "
                             f"that day): {readings}; write it with the offset meant")
    return first.timestamp()


def _gap(at: datetime, tz: tzinfo) -> tuple[str, str]:
    """The last wall-clock minute before the change that skips ``at``, and the first after.
    fold=1 and fold=0 read ``at`` with the offsets after and before the change: the instants
    they give bracket it, a minute's steps find it (a gap is an hour or two)."""
    ts = at.replace(tzinfo=tz, fold=1).timestamp()
    end = at.replace(tzinfo=tz, fold=0).timestamp()
    offset = datetime.fromtimestamp(ts, tz).utcoffset()
    while ts < end and datetime.fromtimestamp(ts + 60, tz).utcoffset() == offset:
        ts += 60
    return (f"{datetime.fromtimestamp(ts, tz):%H:%M}",
            f"{datetime.fromtimestamp(ts + 60, tz):%H:%M}")
