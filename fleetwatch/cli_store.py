"""Commands that look after the embedded store itself: ``backup`` (a consistent copy of a
live SQLite store) and ``silence import`` (a store's silences carried to another)."""

from __future__ import annotations

import argparse
import os
import sys

from fleetwatch.cli_history import EXIT_ERROR, EXIT_OK, EXIT_USAGE, missing_store
from fleetwatch.config import Config


def cmd_backup(config: Config, args: argparse.Namespace) -> int:
    """``fleetwatch backup DEST``: the store as it is now, whole, while it is written."""
    from fleetwatch.backup import BackupError, backup, said

    if config.store.kind != "sqlite":
        print(f"fleetwatch backup: store.kind is {config.store.kind!r}: this copies the "
              "embedded SQLite store only (name one with --store); back a server store up "
              "with its own tools (vmbackup for VictoriaMetrics, influxd backup for InfluxDB)",
              file=sys.stderr)
        return EXIT_USAGE
    store = config.store.path
    missing = missing_store(config)  # names `up`'s fleetwatch-sim.db where that is here
    if missing:
        print(f"fleetwatch backup: {missing}", file=sys.stderr)
        return EXIT_ERROR
    dest = args.dest
    if os.path.isdir(dest):  # into a folder, under the store's own name, as cp does
        dest = os.path.join(dest, os.path.basename(store))
    shown = [-1]

    def progress(done: int, total: int) -> None:
        tenth = done * 10 // max(1, total)
        if total >= 4 * 4096 and tenth > shown[0]:  # a big store: a line a tenth
            shown[0] = tenth
            print(f"  {tenth * 10:3d}% ({done:,} of {total:,} pages)", file=sys.stderr,
                  flush=True)

    try:
        result = backup(store, dest, progress, compact=args.compact)
    except BackupError as exc:
        print(f"fleetwatch backup: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(said(store, result), file=sys.stderr)
    return EXIT_OK


def import_silences(store: object, source: str, target: str) -> int:
    """``fleetwatch silence import --from OLD.db``: the silences in force and the
    acknowledgements of open alerts of ``source`` that ``store`` lacks, written there."""
    import sqlite3
    import time
    from pathlib import Path

    from fleetwatch.alert_view import utc
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.pipeline.store.sqlite import SqliteStore
    from fleetwatch.silencing import comment_dropped
    from fleetwatch.store_switch import carry

    if not Path(source).is_file():
        print(f"fleetwatch silence: no store at {source} (--from): name the SQLite file the "
              "silences were made in", file=sys.stderr)
        return EXIT_ERROR
    old = SqliteStore(source, read_only=True)
    try:
        done = carry(old, store, time.time())
    except (StoreError, sqlite3.Error) as exc:
        print(f"fleetwatch silence: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        old.close()
    for s in done.silences:
        matchers = ",".join(f"{n}{op}{v}" for n, op, v in s.matchers)
        print(f"{s.id} {matchers} until {utc(s.end_ts)} UTC"
              + (f" ({s.comment})" if s.comment else ""))
    print(f"imported {len(done.silences)} silence(s) and {len(done.acks)} acknowledgement(s) "
          f"from {source} into {target} (those already there, and silences that ended, are "
          "left out)", file=sys.stderr)
    dropped = comment_dropped(store, [*(s.comment for s in done.silences),
                                      *(a.comment for a in done.acks)],
                              "silences and acknowledgements imported")
    if dropped:
        print(f"fleetwatch silence: {dropped}", file=sys.stderr)
    return EXIT_OK
