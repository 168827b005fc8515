"""``fleetwatch timeline``: the store's alerts, notifications, acknowledgements, silences,
events and injected faults over a window, in time order (``fleetwatch.timeline``), as
text, JSON lines or CSV, in the time zone asked (UTC by default)."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from fleetwatch.cli_history import EXIT_ERROR, EXIT_OK, EXIT_USAGE, missing_store
from fleetwatch.config import Config

# How far before the window a job's start is looked for (``--job``).
JOB_LOOKBACK_S = 7 * 86400.0


def when(text: str, now: float, tz: ZoneInfo) -> float:
    """``--since``/``--until``: a duration before now (``2h``, ``3d``), or a date and time
    (``2026-11-27 16:30``, ISO 8601; in ``tz`` unless it carries its offset)."""
    from fleetwatch.durations import parse_duration

    try:
        return now - parse_duration(text.strip())
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is neither a duration before now (30m, 2h, 7d) nor a date "
                         "and time (2026-11-27 16:30, 2026-11-27T16:30:00+01:00)") from None
    return (at if at.tzinfo is not None else at.replace(tzinfo=tz)).timestamp()


def cmd_timeline(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.report_month import ZoneError, zone
    from fleetwatch.timeline import Scope, build, csv_text, job_scope, json_line, text_line

    now = time.time()
    try:
        tz = zone(args.tz)
        start = when(args.since, now, tz)
        end = when(args.until, now, tz) if args.until else now + 1
    except (ValueError, ZoneError) as exc:
        print(f"fleetwatch timeline: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if end <= start:
        print(f"fleetwatch timeline: the window is empty: --since {args.since} is "
              f"{_at(start, tz)} {tz.key}, not before "
              + (f"--until {args.until} ({_at(end, tz)})" if args.until else
                 f"now ({_at(now, tz)})"), file=sys.stderr)
        return EXIT_USAGE
    scope = Scope(start, end, args.cluster or "", args.rack or "", args.node or "",
                  args.job or "")
    got = _read(config, scope)
    if isinstance(got, str):
        print(f"fleetwatch timeline: {got}", file=sys.stderr)
        return EXIT_ERROR
    records, job_events, notes, name = got
    slots = None
    if scope.job:
        scope, slots = job_scope(scope, job_events)
        if not slots:
            print(f"fleetwatch timeline: no job {scope.job!r} started or ran on any GPU of "
                  f"{name} between {args.since} and {args.until or 'now'} (job_start events"
                  f" from {JOB_LOOKBACK_S / 86400:g} days before)", file=sys.stderr)
            return EXIT_ERROR
    entries = build(records, scope, slots)
    for note in notes:
        print(f"fleetwatch timeline: note: {note}", file=sys.stderr)
    if args.format == "json":
        for e in entries:
            print(json_line(e, tz))
    elif args.format == "csv":
        sys.stdout.write(csv_text(entries, tz))
    else:
        print(f"{len(entries)} entries in {name} from {_at(scope.start, tz)} to "
              f"{_at(min(scope.end, now), tz)} (times {tz.key})")
        for e in entries:
            print(text_line(e, tz))
    return EXIT_OK


def _at(ts: float, tz: ZoneInfo) -> str:
    return datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d %H:%M:%S")


def _read(config: Config, scope: Any) -> tuple[Any, list[Any], list[str], str] | str:
    """The records of the window, the job events (``--job``), notes on what the store does
    not keep, and the store's name; or why they could not be read."""
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.timeline import EVENT_KINDS, Records
    from fleetwatch.wiring import open_store, store_name

    c = config.store
    missing = missing_store(config)
    if missing:
        return missing
    name = store_name(c)
    try:
        store = open_store(c, read_only=c.kind == "sqlite")
    except StoreError as exc:
        return str(exc)
    notes = []
    try:
        alerts = store.alerts(("pending", "firing", "resolved"), since_ts=scope.start)
        read_notes = getattr(store, "notifications", None)
        notified = read_notes(scope.start, scope.end) if callable(read_notes) else []
        if not callable(read_notes):
            notes.append(f"{name} keeps no record of notifications")
        events = store.events(scope.start, scope.end, node=scope.node or None,
                              kinds=EVENT_KINDS)
        job_events = (store.events(scope.start - JOB_LOOKBACK_S, scope.end,
                                   node=scope.node or None, kinds=("job_start", "job_end"))
                      if scope.job else [])
        faults = store.annotations(scope.start, scope.end)
        records = Records(alerts, notified, store.acks(), store.silences(), events, faults)
    except StoreError as exc:
        return f"cannot read {name}: {exc}"
    finally:
        store.close()
    if not getattr(store, "keeps_text", True):
        notes.append(f"{name} keeps no comment of acknowledgements and silences, no alert "
                     "message and no event text (numbers and names only)")
    return records, job_events, notes, name
