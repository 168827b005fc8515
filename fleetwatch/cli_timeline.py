"""``fleetwatch timeline``: the store's alerts, notifications, acknowledgements, silences,
events and injected faults over a window, in time order (``fleetwatch.timeline``), as
text, JSON lines or CSV, in the time zone asked (UTC by default)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from fleetwatch.cli_history import EXIT_ERROR, EXIT_OK, EXIT_USAGE, missing_store
from fleetwatch.config import Config

# How far before the window a job's start is looked for (``--job``).
JOB_LOOKBACK_S = 7 * 86400.0


def when(text: str, now: float, tz: ZoneInfo, flag: str) -> float:
    """``--since``/``--until`` (``flag``): a duration before now (``2h``, ``3d``), or a date
    and time (``2026-11-27 16:30``, ISO 8601; in ``tz`` unless it carries its offset, and
    refused where ``tz`` skips it or has it twice, as ``silence add`` refuses it)."""
    from fleetwatch.durations import parse_duration
    from fleetwatch.local_time import moment

    try:
        return now - parse_duration(text.strip())
    except ValueError:
        pass
    return moment(text, flag, tz, unreadable=(
        f"{text!r} is neither a duration before now (30m, 2h, 7d) nor a date and time "
        "(2026-11-27 16:30, 2026-11-27T16:30:00+01:00)"))


def cmd_timeline(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.pipeline.store.ledger import job_owners, owner_text
    from fleetwatch.report_month import ZoneError, zone
    from fleetwatch.timeline import (
        Scope,
        build,
        csv_text,
        job_scope,
        json_line,
        text_line,
    )

    now = time.time()
    try:
        tz = zone(args.tz)
        start = when(args.since, now, tz, "--since")
        end = when(args.until, now, tz, "--until") if args.until else now + 1
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
    got = _read(config, scope, args.fault_hours)
    if isinstance(got, str):
        print(f"fleetwatch timeline: {got}", file=sys.stderr)
        return EXIT_ERROR
    records, job_events, notes, name, owned = got
    slots = None
    if scope.job:
        scope, slots = job_scope(scope, job_events)
        if not slots:
            print(f"fleetwatch timeline: no job {scope.job!r} started or ran on any GPU of "
                  f"{name} between {args.since} and {args.until or 'now'} (job_start events"
                  f" from {JOB_LOOKBACK_S / 86400:g} days before)", file=sys.stderr)
            return EXIT_ERROR
    if args.fault_hours:
        return _print_hours(records, job_events, scope, slots, args.format)
    entries = build(records, scope, slots, args.pending_cleared)
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
        owner = owner_text(job_owners(owned, records.alerts, scope.job)) if scope.job else ""
        if owner:  # whom to tell: what the agent read from the scheduler
            print(f"job {scope.job}: {owner.replace(' · ', ', ')}")
        for e in entries:
            print(text_line(e, tz))
        if not args.pending_cleared:
            _say_left_out(build(records, scope, slots, True), entries)
    return EXIT_OK


def _say_left_out(every: Sequence[Any], shown: Sequence[Any]) -> None:
    """How many alerts that cleared while pending (``timeline.pending_cleared``) the text
    left out (``every``: the entries with them), and how to see them."""
    left = {e.alert_id for e in every if e.what == "pending cleared"} - {
        e.alert_id for e in shown}
    if left:
        print(f"({len(left)} pending alert{'s' if len(left) != 1 else ''} that cleared without "
              "firing left out (--pending-cleared shows them))")


def _print_hours(records: Any, job_events: list[Any], scope: Any, slots: Any,
                 fmt: str) -> int:
    """``--fault-hours``: GPU-hours under fault alerts by job and by user, per rule."""
    import csv
    import json

    from fleetwatch.fault_hours import by_user, fault_hours
    from fleetwatch.pipeline.events import jobs_of
    from fleetwatch.pipeline.store.base import Event
    from fleetwatch.timeline import in_place

    events = [e for e in job_events if isinstance(e, Event)
              and in_place(scope, e.cluster, e.rack, e.node, e.device, slots)]
    owners = {job: (user, team) for job, user, team in
              (x for x in job_events if isinstance(x, tuple))}
    rack_of = {e.node: e.rack for e in events}
    lines = fault_hours(records.alerts, [j for j in jobs_of(events)
                                         if not scope.job or scope.job in j[2].split(",")],
                        owners, rack_of, scope.start, scope.end)
    users = by_user(lines)
    if fmt == "json":
        for f in lines:
            print(json.dumps({"by": "job", "job": f.job, "user": f.user, "team": f.team,
                              "rule": f.rule, "gpu_hours": round(f.gpu_hours, 6),
                              "gpus": f.gpus}))
        for user, rule, hours in users:
            print(json.dumps({"by": "user", "user": user, "rule": rule,
                              "gpu_hours": round(hours, 6)}))
    elif fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(("by", "job", "user", "team", "rule", "gpu_hours", "gpus"))
        w.writerows(("job", f.job, f.user, f.team, f.rule, f"{f.gpu_hours:.6f}", f.gpus)
                    for f in lines)
        w.writerows(("user", "", u, "", r, f"{h:.6f}", "") for u, r, h in users)
    else:
        print("GPU-hours under firing fault alerts (warning, critical) by job; (any): each "
              "GPU-second once")
        for f in lines:
            print(f"  job {f.job:<12} {f.user or '(no user)':<12} {f.rule:<28} "
                  f"{f.gpu_hours:8.2f} GPU-h on {f.gpus} GPU(s)")
        print("by user")
        for user, rule, hours in users:
            print(f"  {user or '(no user)':<12} {rule:<28} {hours:8.2f} GPU-h")
    return EXIT_OK


def _at(ts: float, tz: ZoneInfo) -> str:
    return datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d %H:%M:%S")


def _read(config: Config, scope: Any, hours: bool = False
          ) -> tuple[Any, list[Any], list[str], str, list[Any]] | str:
    """The records of the window, the job events (``--job``, ``--fault-hours``; with the
    latter, the ledger's (job, user, team) rows last), notes on what the store does not
    keep, the store's name, and with ``--job`` its energy ledger rows in the window (whom
    it belongs to); or why they could not be read."""
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
                      if scope.job or hours else [])
        if hours and callable(getattr(store, "energy", None)):
            job_events = [*job_events, *{(r.job, r.user, r.team) for r in store.energy(
                scope.start - 3600, scope.end, cluster=scope.cluster or None,
                node=scope.node or None) if r.job}]
        owned = ([r for r in store.energy(scope.start - 3600, scope.end,
                                          cluster=scope.cluster or None,
                                          node=scope.node or None) if r.job == scope.job]
                 if scope.job and callable(getattr(store, "energy", None)) else [])
        faults = store.annotations(scope.start, scope.end)
        records = Records(alerts, notified, store.acks(), store.silences(), events, faults)
    except StoreError as exc:
        return f"cannot read {name}: {exc}"
    finally:
        store.close()
    if not getattr(store, "keeps_text", True):
        notes.append(f"{name} keeps no comment of acknowledgements and silences, no alert "
                     "message and no event text (numbers and names only)")
    return records, job_events, notes, name, owned
