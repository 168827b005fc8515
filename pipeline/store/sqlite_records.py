"""The SQLite store's alerts, annotations and events, and how its errors reach the caller.

Alerts: one row per (cluster, id), its columns derived from the ``Alert``
dataclass (a mapping such as ``evidence`` as JSON text), so that a field
added to ``Alert`` becomes a column (added to an existing file on open)
with no edit here; a read-only reader of a file that lacks such a column
reads it as the field's default. Two clusters whose nodes share names never share a row.

Events: one row per (ts in ms, kind, cluster, rack, node, device, code,
value, exact ts), with their text: SQLite keeps every part of an ``Event``. The exact
time is part of the key, so that events microseconds apart (a kernel's burst of one
XID) are each kept, while one written again (a batch retried) is still one row; a file
of earlier versions, keyed by the millisecond, is migrated on open (``key_events``).

Every ``sqlite3`` error becomes a ``StoreError`` (transient: a locked
database, a full disk, I/O) or a ``StoreRejected`` (the data itself: a
constraint, a value SQLite cannot bind), so no sqlite3 exception ever
escapes into the processor's threads.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Alert,
    AlertState,
    Annotation,
    Event,
    EventGroup,
    StoreError,
    StoreRejected,
    group_order,
)
from fleetwatch.pipeline.store.lprecords import ALERT_FIELDS, sequence_of
from fleetwatch.pipeline.store.sqlite_errors import busy, describe, held_by_another

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger(__name__)

# How long an opener waits for another process converting the events table of an
# earlier version's file (2M events took 9 s on a loaded machine): far longer than the
# busy timeout of a write, so that a second worker waits rather than exits.
_CONVERT_WAIT_S: float = 600
# How long an opener waits for that lock before it says that it waits (at most its busy
# timeout): an ordinary write holds it for milliseconds, a conversion for seconds.
_SAY_WAIT_AFTER_MS = 1000

ALERT_TABLE = "alert_states"
# Annotations by cluster; ``annotations`` (no cluster, a key without one) is the table of
# earlier versions: a writer moves its rows over as cluster "" (any), a reader reads both.
ANNOTATION_TABLE = "cluster_annotations"
_OLD_ANNOTATIONS = "annotations"
_ANNOTATION_COLUMNS = "kind, start_ts, end_ts, node, device, text"
_COLUMN_TYPES = {"float": "REAL", "int": "INTEGER", "bool": "INTEGER", "mapping": "TEXT",
                 "json": "TEXT", "text": "TEXT", "state": "TEXT"}
_ALERT_COLUMNS = [name for name, _ in ALERT_FIELDS]
# Fields kept as JSON text: mappings (evidence) and sequences.
_JSON = {name: kind for name, kind in ALERT_FIELDS if kind in ("mapping", "json")}

_EVENTS_TABLE = """CREATE TABLE IF NOT EXISTS {name} (
    ts_ms INTEGER NOT NULL, ts REAL NOT NULL, kind TEXT NOT NULL, cluster TEXT NOT NULL,
    rack TEXT NOT NULL, node TEXT NOT NULL, device TEXT NOT NULL, code INTEGER NOT NULL,
    value TEXT NOT NULL, text TEXT NOT NULL,
    PRIMARY KEY (ts_ms, kind, cluster, rack, node, device, code, value, ts)) WITHOUT ROWID"""
# The events key of earlier versions ended at value: events in one ms were one row.
_OLD_EVENTS_KEY = "code, value))"

RECORDS_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {ALERT_TABLE} (
    {", ".join(f"{name} {_COLUMN_TYPES[kind]}" for name, kind in ALERT_FIELDS)},
    PRIMARY KEY (cluster, id));
CREATE INDEX IF NOT EXISTS alert_states_by_state ON {ALERT_TABLE} (state, updated_ts);
CREATE TABLE IF NOT EXISTS {ANNOTATION_TABLE} (
    kind TEXT, start_ts REAL, end_ts REAL, node TEXT, device TEXT, text TEXT, cluster TEXT,
    UNIQUE (kind, start_ts, cluster, node, device));
{_EVENTS_TABLE.format(name="events")};
CREATE INDEX IF NOT EXISTS events_by_node ON events (node, ts_ms);
"""

# SQLite's own words for failures that will not go away by trying again.
_PERMANENT = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError,
              sqlite3.NotSupportedError, OverflowError)


def guarded(what: str) -> Callable[[F], F]:
    """Turn sqlite3 errors of the decorated method into ``StoreError``/``StoreRejected``."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except _PERMANENT as exc:
                raise StoreRejected(f"sqlite {what} in {self.path} refused: {exc}") from exc
            except sqlite3.OperationalError as exc:
                # A read-only reader of a file no writer has opened since an upgrade.
                if "no such table" in str(exc) and what.endswith(" read"):  # records only
                    return []
                raise StoreError(f"sqlite {what} in {self.path} failed: "
                                 f"{describe(self.path, exc)}") from exc
            except sqlite3.Error as exc:  # locked, busy, disk full, I/O: may pass
                raise StoreError(f"sqlite {what} in {self.path} failed: "
                                 f"{describe(self.path, exc)}") from exc
        return call  # type: ignore[return-value]
    return wrap


class SqliteRecords:
    """Alerts, annotations and events of ``SqliteStore`` (which supplies ``_conn`` and ``path``)."""

    path: str
    _conn: Callable[[], sqlite3.Connection]

    def _create_records(self, conn: sqlite3.Connection) -> None:
        conn.executescript(RECORDS_SCHEMA)
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({ALERT_TABLE})")}
        for name, kind in ALERT_FIELDS:  # a field added to Alert since the file was made
            if name not in have:
                conn.execute(f"ALTER TABLE {ALERT_TABLE} ADD COLUMN {name} "
                             f"{_COLUMN_TYPES[kind]}")
        old = {row[1] for row in conn.execute("PRAGMA table_info(alerts)")}
        if old:  # the table of earlier versions, keyed by id alone: move its rows over
            shared = [c for c in _ALERT_COLUMNS if c in old]
            with conn:
                conn.execute(f"INSERT OR IGNORE INTO {ALERT_TABLE} ({', '.join(shared)}) "
                             f"SELECT {', '.join(shared)} FROM alerts")
                conn.execute("DROP TABLE alerts")
        if conn.execute("PRAGMA table_info(annotations)").fetchall():
            with conn:
                conn.execute(f"INSERT OR IGNORE INTO {ANNOTATION_TABLE} SELECT "
                             f"{_ANNOTATION_COLUMNS}, '' FROM {_OLD_ANNOTATIONS}")
                conn.execute(f"DROP TABLE {_OLD_ANNOTATIONS}")

    # -- alerts
    @guarded("alert write")
    def write_alerts(self, alerts: Sequence[Alert]) -> None:
        if not alerts:
            return
        marks = ",".join("?" * len(_ALERT_COLUMNS))
        rows = [tuple(_to_column(c, getattr(a, c)) for c in _ALERT_COLUMNS) for a in alerts]
        with self._conn() as conn:
            conn.executemany(f"INSERT OR REPLACE INTO {ALERT_TABLE} "
                             f"({', '.join(_ALERT_COLUMNS)}) VALUES ({marks})", rows)

    @guarded("alert read")
    def alerts(self, states: Sequence[AlertState] = ACTIVE_STATES,
               since_ts: float | None = None) -> list[Alert]:
        conn = self._conn()
        # Only the columns the file has: a read-only reader cannot add those of fields
        # added since (a file no new writer has opened yet); the rest read as empty.
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({ALERT_TABLE})")}
        columns = [c for c in _ALERT_COLUMNS if c in have]
        if not columns:  # no alert table yet: nothing was ever written
            return []
        marks = ",".join("?" * len(states))
        sql = (f"SELECT {', '.join(columns)} FROM {ALERT_TABLE} "
               f"WHERE state IN ({marks})")
        args: list[object] = list(states)
        if since_ts is not None:
            sql += " AND updated_ts >= ?"
            args.append(since_ts)
        rows = conn.execute(sql + " ORDER BY started_ts DESC", args).fetchall()
        return [_alert(dict(zip(columns, row, strict=True))) for row in rows]

    # -- annotations
    @guarded("annotation write")
    def write_annotations(self, annotations: Sequence[Annotation]) -> None:
        with self._conn() as conn:
            conn.executemany(f"INSERT OR REPLACE INTO {ANNOTATION_TABLE} "
                             f"({_ANNOTATION_COLUMNS}, cluster) VALUES (?,?,?,?,?,?,?)",
                             [(a.kind, a.start_ts, a.end_ts, a.node, a.device, a.text,
                               a.cluster) for a in annotations])

    @guarded("annotation read")
    def annotations(self, start_ts: float, end_ts: float) -> list[Annotation]:
        conn = self._conn()
        # A read-only reader of a file no writer has opened since annotations had a
        # cluster finds the old table alone (or, after a rollback's writes, both).
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
            (ANNOTATION_TABLE, _OLD_ANNOTATIONS))}
        parts = [f"SELECT {_ANNOTATION_COLUMNS}, cluster FROM {ANNOTATION_TABLE}"
                 ] if ANNOTATION_TABLE in tables else []
        if _OLD_ANNOTATIONS in tables:
            parts.append(f"SELECT {_ANNOTATION_COLUMNS}, '' FROM {_OLD_ANNOTATIONS}")
        if not parts:
            return []
        rows = conn.execute(
            f"SELECT * FROM ({' UNION ALL '.join(parts)}) WHERE start_ts < ? "
            "AND (end_ts IS NULL OR end_ts >= ?) ORDER BY start_ts", (end_ts, start_ts))
        return [Annotation(*r) for r in rows.fetchall()]

    # -- events
    @guarded("event write")
    def write_events(self, events: Sequence[Event]) -> None:
        if not events:
            return
        with self._conn() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO events VALUES (?,?,?,?,?,?,?,?,?,?)",
                [(round(e.ts * 1000), e.ts, e.kind, e.cluster, e.rack, e.node, e.device,
                  int(e.code), e.value, e.text) for e in events])

    @guarded("event read")
    def events(self, start_ts: float, end_ts: float, node: str | None = None,
               kinds: Sequence[str] | None = None, device: str | None = None,
               except_xids: Collection[int] = ()) -> list[Event]:
        sql = ("SELECT ts, kind, cluster, rack, node, device, code, value, text FROM events "
               "WHERE ts_ms >= ? AND ts_ms < ?")
        args: list[object] = [round(start_ts * 1000), round(end_ts * 1000)]
        for column, wanted in (("node", node), ("device", device)):
            if wanted is not None:
                sql += f" AND {column} = ?"
                args.append(wanted)
        if kinds is not None:
            if not kinds:
                return []
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        if except_xids:  # in the query: never made into Python objects
            codes = sorted({int(c) for c in except_xids})
            sql += f" AND NOT (kind = 'xid' AND code IN ({','.join('?' * len(codes))}))"
            args.extend(codes)
        rows = self._conn().execute(sql + " ORDER BY ts_ms, node, device, kind, code",
                                    args).fetchall()
        return [Event(*r) for r in rows]


    @guarded("event read")
    def event_groups(self, start_ts: float, end_ts: float, node: str,
                     kinds: Sequence[str], limit: int | None = None) -> list[EventGroup]:
        """The node's events in [start, end) as repeat groups (``group_events``), counted
        in the query: one row a device and code, however many repeats (a storm stores
        one a second). With ``limit``, only the newest ``limit`` events are counted (their
        counts then add up to it). The index on (node, ts_ms) holds every column read;
        ``text`` is left empty."""
        if not kinds or (limit is not None and limit <= 0):
            return []
        rows = self._conn().execute(
            "SELECT kind, cluster, rack, node, device, code, value, COUNT(*), MIN(ts_ms), "
            "MAX(ts_ms) FROM (SELECT kind, cluster, rack, node, device, code, value, ts_ms "
            "FROM events WHERE node = ? AND ts_ms >= ? "
            f"AND ts_ms < ? AND kind IN ({','.join('?' * len(kinds))}) "
            "ORDER BY ts_ms DESC LIMIT ?) "
            "GROUP BY kind, cluster, rack, node, device, code, value",
            [node, round(start_ts * 1000), round(end_ts * 1000), *kinds,
             -1 if limit is None else limit]).fetchall()
        groups = [EventGroup(Event(last / 1000, kind, cluster, rack, node_, device, code,
                                   value), count, first / 1000)
                  for kind, cluster, rack, node_, device, code, value, count, first, last
                  in rows]
        return sorted(groups, key=group_order)


def _old_events_key(conn: sqlite3.Connection) -> bool:
    """Whether the file's events table is keyed by the millisecond (earlier versions)."""
    rows = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND "
                        "name = 'events'").fetchall()  # all: no statement left open
    return bool(rows) and rows[0][0].replace(" ", "").endswith(
        _OLD_EVENTS_KEY.replace(" ", "") + "WITHOUTROWID")


def key_events(conn: sqlite3.Connection, path: str) -> None:
    """Move the events of a file keyed by the millisecond into a table keyed by the exact
    time too (their rows are kept as they are; what was merged before is gone).

    Check and conversion are one write transaction (DDL included), so that a second
    process opening the file at once (``process --workers N``) waits for the first and
    then finds it done, rather than acting on what it saw before. The opener calls this
    before any other write of its schema setup: those wait only the busy timeout."""
    if not _old_events_key(conn):
        return  # the usual case: no lock taken
    _lock_to_convert(conn, path)
    try:
        if not _old_events_key(conn):  # converted meanwhile by another process
            conn.rollback()
            return
        count = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        log.warning("converting the events table of %s to the new layout (%s events); "
                    "other writers of this store wait until it is done", path, f"{count:,}")
        started = time.monotonic()
        conn.execute(_EVENTS_TABLE.format(name="events_keyed"))
        conn.execute("INSERT OR IGNORE INTO events_keyed SELECT * FROM events")
        conn.execute("DROP TABLE events")
        conn.execute("ALTER TABLE events_keyed RENAME TO events")
        conn.execute("CREATE INDEX IF NOT EXISTS events_by_node ON events (node, ts_ms)")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    log.warning("converted the events table of %s (%s events) in %.1f s", path, f"{count:,}",
                time.monotonic() - started)


def _lock_to_convert(conn: sqlite3.Connection, path: str) -> None:
    """Begin the conversion's write transaction: waiting as long as a conversion may take
    (``_CONVERT_WAIT_S``) for another process converting the file, and saying so once the
    lock has not come within a second (another writer's usual lock is milliseconds)."""
    before = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    try:
        if _begin_immediate(conn, min(before, _SAY_WAIT_AFTER_MS)):
            return
        log.warning("waiting for another process converting the events table of %s "
                    "(up to %g s)", path, _CONVERT_WAIT_S)
        if _begin_immediate(conn, round(_CONVERT_WAIT_S * 1000)):
            return
    finally:
        conn.execute(f"PRAGMA busy_timeout={before}")
    raise StoreError(held_by_another(
        path, _CONVERT_WAIT_S, "convert its events table (a store of an earlier version, "
        "whose 2M events convert in 8 to 15 s)"))


def _begin_immediate(conn: sqlite3.Connection, wait_ms: int) -> bool:
    """Take the file's write lock (``BEGIN IMMEDIATE``), waiting up to ``wait_ms`` for
    another connection's; False when it did not come."""
    conn.execute(f"PRAGMA busy_timeout={wait_ms}")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if busy(exc):
            return False
        raise
    return True


def _to_column(name: str, value: Any) -> Any:
    kind = _JSON.get(name)
    if kind == "mapping":
        return json.dumps(dict(value))
    if kind == "json":
        return json.dumps(list(value))
    return value


def _alert(stored: dict[str, Any]) -> Alert:
    kw = {name: stored.get(name) for name in _ALERT_COLUMNS}  # a missing column: empty
    fields = {f.name: f for f in dataclasses.fields(Alert)}
    for name, kind in _JSON.items():
        if kw[name] is None:
            continue  # filled with the default below
        value = json.loads(kw[name])
        kw[name] = value if kind == "mapping" else sequence_of(fields[name].type, value)
    for name, kind in ALERT_FIELDS:
        if kind == "bool" and kw[name] is not None:
            kw[name] = bool(kw[name])
    for name, value in list(kw.items()):  # a column an older file left empty
        f = fields[name]
        if value is None and f.default_factory is not dataclasses.MISSING:
            kw[name] = f.default_factory()
        elif value is None and f.default is not None and f.default is not dataclasses.MISSING:
            kw[name] = f.default
    return Alert(**kw)
