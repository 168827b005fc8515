"""The energy ledger in the embedded SQLite store (mixed into ``SqliteStore``).

Two tables beside the samples: ``energy`` (one row per hour bucket, device
and owner, replaced on rewrite) and ``energy_state`` (the integrator's
watermark per device, with ``energy_reading`` for a counter that owes),
written in one transaction so that a crash leaves both old or both new.
The columns of energy measured across gaps (``ledger.GAP_FIELDS``) are added to an
``energy`` table made before them when the store is opened for writing (0 in its rows);
a store opened read-only without them reads them as 0.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.ledger import (
    CLUSTER_KEYS,
    GAP_FIELDS,
    ROW_FIELDS,
    TOTAL_KEYS,
    DeviceState,
    EnergyRow,
    EnergyTotal,
    TopLine,
    bucket_floor,
    check_keys,
)
from fleetwatch.pipeline.store.sqlite_errors import describe

J_PER_KWH = 3.6e6
ROLL_UP_HOURS = 500  # hours rolled up per statement (SQLite's default limit: 32,766)
# Totals per cluster (``per_cluster``) are rolled up as their own kinds ("job per cluster")
# in energy_agg, named "<cluster>\x1f<job>": one table, one key, and no cluster name holds
# a control character (agents take it from a config file or a hostname).
SEP = "\x1f"

_KEY_COLUMNS = "bucket_ts, cluster, rack, node, device, job, user, team"
_INSERT = (f"INSERT OR REPLACE INTO energy ({_KEY_COLUMNS}, {', '.join(ROW_FIELDS)}) "
           f"VALUES ({','.join('?' * (8 + len(ROW_FIELDS)))})")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS energy (
    bucket_ts INTEGER NOT NULL, cluster TEXT NOT NULL, rack TEXT NOT NULL, node TEXT NOT NULL,
    device TEXT NOT NULL, job TEXT NOT NULL, user TEXT NOT NULL, team TEXT NOT NULL,
    energy_j REAL NOT NULL, idle_j REAL NOT NULL, seconds REAL NOT NULL, idle_s REAL NOT NULL,
    missing_s REAL NOT NULL, over_tdp_s REAL NOT NULL,
    gap_j REAL NOT NULL DEFAULT 0, gap_s REAL NOT NULL DEFAULT 0, gaps REAL NOT NULL DEFAULT 0,
    longest_gap_s REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket_ts, cluster, node, device, job, user, team)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS energy_by_node ON energy (cluster, node, bucket_ts);
-- Hours whose rows changed since they were last rolled up into energy_agg.
CREATE TABLE IF NOT EXISTS energy_dirty (bucket_ts INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS energy_agg (
    kind TEXT NOT NULL, bucket_ts INTEGER NOT NULL, name TEXT NOT NULL,
    energy_j REAL, idle_j REAL, gpu_energy_j REAL, gpu_s REAL, idle_s REAL, missing_s REAL,
    over_tdp_s REAL, PRIMARY KEY (kind, bucket_ts, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS energy_state (
    cluster TEXT NOT NULL, node TEXT NOT NULL, device TEXT NOT NULL, ts REAL NOT NULL,
    power_w REAL, counter_j REAL, PRIMARY KEY (cluster, node, device)) WITHOUT ROWID;
-- The counter's own reading at watermark ts where counter_j includes owed energy; a
-- table of its own so that energy_state keeps the columns earlier releases read and write.
CREATE TABLE IF NOT EXISTS energy_reading (
    cluster TEXT NOT NULL, node TEXT NOT NULL, device TEXT NOT NULL, ts REAL NOT NULL,
    reading_j REAL NOT NULL, PRIMARY KEY (cluster, node, device)) WITHOUT ROWID;
"""


class SqliteEnergy:
    """Needs the host class's ``_conn()`` (a per-thread connection) and ``path``."""

    path: str
    _energy_ready = False
    # The columns a row is read from: the gap fields as 0 where the table has none (a
    # store made before them, opened read-only).
    _row_select = f"{_KEY_COLUMNS}, {', '.join(ROW_FIELDS)}"

    if TYPE_CHECKING:
        def _conn(self) -> sqlite3.Connection: ...  # provided by SqliteStore

    def _energy_conn(self) -> sqlite3.Connection:
        conn = self._conn()
        if not self._energy_ready:
            try:
                conn.executescript(_SCHEMA)
                with conn:  # rows from before the roll-ups existed: every hour to do
                    conn.execute("INSERT OR IGNORE INTO energy_dirty SELECT DISTINCT bucket_ts "
                                 "FROM energy WHERE NOT EXISTS (SELECT 1 FROM energy_agg)")
                    # hours rolled up before the kinds per cluster: to do again
                    conn.execute("INSERT OR IGNORE INTO energy_dirty SELECT DISTINCT bucket_ts "
                                 "FROM energy_agg WHERE kind = 'cluster' EXCEPT SELECT "
                                 "bucket_ts FROM energy_agg WHERE kind = ?",
                                 (_kind(CLUSTER_KEYS[0], True),))
                    for name in self._gap_columns_missing(conn):  # a table made before them
                        conn.execute(f"ALTER TABLE energy ADD COLUMN {name} REAL NOT NULL "
                                     "DEFAULT 0")
            except sqlite3.OperationalError as exc:
                if "readonly" not in str(exc):
                    raise StoreError(f"sqlite {self.path}: {exc}") from exc
            except sqlite3.DatabaseError as exc:
                # Not SQLite at all ("file is not a database"): the first statement is the
                # first read of the file, so it is said here, as a StoreError the commands
                # turn into one line, not a traceback from the first query.
                raise StoreError(describe(self.path, exc)) from exc
            missing = self._gap_columns_missing(conn)
            self._row_select = ", ".join([_KEY_COLUMNS, *ROW_FIELDS[:-len(GAP_FIELDS)], *(
                f"0.0 AS {f}" if f in missing else f for f in GAP_FIELDS)])
            self._energy_ready = True
        return conn

    @staticmethod
    def _gap_columns_missing(conn: sqlite3.Connection) -> list[str]:
        have = {r[1] for r in conn.execute("PRAGMA table_info(energy)")}
        return [f for f in GAP_FIELDS if have and f not in have]

    def write_energy(self, rows: Sequence[EnergyRow], states: Sequence[DeviceState]) -> None:
        conn = self._energy_conn()
        try:
            with conn:
                conn.executemany(_INSERT, rows)
                conn.executemany("INSERT OR REPLACE INTO energy_state VALUES (?,?,?,?,?,?)",
                                 [s[:6] for s in states])
                # Only while a counter owes (rare); a row left from an earlier watermark
                # is ignored on read, as its ts is not the watermark's.
                conn.executemany("INSERT OR REPLACE INTO energy_reading VALUES (?,?,?,?,?)",
                                 [(s.cluster, s.node, s.device, s.ts, s.reading_j)
                                  for s in states if s.reading_j is not None])
                conn.executemany("INSERT OR IGNORE INTO energy_dirty VALUES (?)",
                                 [(b,) for b in {r.bucket_ts for r in rows}])
        except sqlite3.OperationalError as exc:
            raise StoreError(f"sqlite energy write to {self.path} failed: "
                             f"{describe(self.path, exc)}") from exc

    def energy_state(self, cluster: str, node: str, at_ts: float = 0.0
                     ) -> tuple[list[DeviceState], list[EnergyRow]]:
        conn = self._energy_conn()
        states = [DeviceState(*r) for r in conn.execute(
            "SELECT s.*, r.reading_j FROM energy_state AS s LEFT JOIN energy_reading AS r "
            "ON r.cluster = s.cluster AND r.node = s.node AND r.device = s.device "
            "AND r.ts = s.ts WHERE s.cluster = ? AND s.node = ?", (cluster, node))]
        if not states:
            return [], []
        since = bucket_floor(min(s.ts for s in states))
        rows = [EnergyRow(*r) for r in conn.execute(
            f"SELECT {self._row_select} FROM energy WHERE cluster = ? AND node = ? "
            "AND bucket_ts >= ?",
            (cluster, node, since))]
        return states, rows

    def energy(self, start_ts: float, end_ts: float, cluster: str | None = None,
               node: str | None = None) -> list[EnergyRow]:
        conn = self._energy_conn()
        sql = f"SELECT {self._row_select} FROM energy WHERE bucket_ts >= ? AND bucket_ts < ?"
        args: list[object] = [start_ts, end_ts]
        if cluster is not None:
            sql += " AND cluster = ?"
            args.append(cluster)
        if node is not None:
            sql += " AND node = ?"
            args.append(node)
        try:
            cur = conn.execute(sql + " ORDER BY bucket_ts", args)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # a store written before the ledger existed
            raise StoreError(f"sqlite energy read from {self.path} failed: {exc}") from exc
        return list(map(EnergyRow._make, cur))  # _make in C: a month is ~1.6 M rows

    # -- totals for the dashboard: hourly aggregates, rolled up once an hour has closed
    def roll_up_energy(self, before_ts: float) -> int:
        """Aggregate every changed hour that starts before ``before_ts`` per cluster, rack,
        node, job, user and team (``energy_agg``); returns the hours done. Called by the
        integrator as hours close; a late row marks its hour changed again."""
        conn = self._energy_conn()
        try:
            hours = [h for (h,) in conn.execute(
                "SELECT bucket_ts FROM energy_dirty WHERE bucket_ts < ?", (before_ts,))]
            # In parts of ROLL_UP_HOURS, each its own transaction: one bound parameter per
            # hour, and a store with years of changed hours must not exceed SQLite's limit.
            kinds = [(by, False) for by in TOTAL_KEYS] + [(by, True) for by in CLUSTER_KEYS]
            for i in range(0, len(hours), ROLL_UP_HOURS):
                part = hours[i:i + ROLL_UP_HOURS]
                marks = ",".join("?" * len(part))
                with conn:
                    conn.execute(f"DELETE FROM energy_agg WHERE bucket_ts IN ({marks})", part)
                    for by, per_cluster in kinds:
                        conn.execute(f"INSERT INTO energy_agg SELECT ?, * FROM "
                                     f"({_live(by, marks, per_cluster)})",
                                     (_kind(by, per_cluster), *part))
                    conn.execute(f"DELETE FROM energy_dirty WHERE bucket_ts IN ({marks})",
                                 part)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"sqlite energy roll-up in {self.path} failed: {exc}") from exc
        return len(hours)

    def _totals_sql(self, start_ts: float, end_ts: float, by: str, per_cluster: bool = False
                    ) -> tuple[str, list[object]]:
        """A query of (bucket, name, sums...): rolled-up hours from ``energy_agg``, hours
        changed since from the rows themselves. ``per_cluster``: names "<cluster>SEP<by>"."""
        check_keys(by, per_cluster)
        kind = _kind(by, per_cluster)
        conn = self._energy_conn()
        try:
            dirty = [h for (h,) in conn.execute(
                "SELECT bucket_ts FROM energy_dirty WHERE bucket_ts >= ? AND bucket_ts < ?",
                (start_ts, end_ts))]
            if per_cluster:  # hours rolled up by a release without these kinds
                dirty += [h for (h,) in conn.execute(
                    "SELECT DISTINCT bucket_ts FROM energy_agg WHERE kind = 'cluster' AND "
                    "bucket_ts >= ? AND bucket_ts < ? EXCEPT SELECT DISTINCT bucket_ts FROM "
                    "energy_agg WHERE kind = ? AND bucket_ts >= ? AND bucket_ts < ?",
                    (start_ts, end_ts, kind, start_ts, end_ts))]
                dirty = sorted(set(dirty))
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise StoreError(f"sqlite energy read from {self.path} failed: {exc}") from exc
            # A store from before the roll-ups: every hour from the rows.
            sql = _live(by, "", per_cluster).replace("bucket_ts IN ()",
                                                     "bucket_ts >= ? AND bucket_ts < ?")
            return sql, [start_ts, end_ts]
        marks = ",".join("?" * len(dirty))
        sql = (f"SELECT bucket_ts, name, energy_j, idle_j, gpu_energy_j, gpu_s, idle_s, "
               f"missing_s, over_tdp_s FROM energy_agg WHERE kind = ? AND bucket_ts >= ? "
               f"AND bucket_ts < ? AND bucket_ts NOT IN ({marks})")
        args: list[object] = [kind, start_ts, end_ts, *dirty]
        if dirty:
            sql += f" UNION ALL {_live(by, marks, per_cluster)}"
            args += dirty
        return sql, args

    def energy_totals(self, start_ts: float, end_ts: float, by: str,
                      per_cluster: bool = False) -> list[EnergyTotal]:
        sql, args = self._totals_sql(start_ts, end_ts, by, per_cluster)
        try:
            cur = self._energy_conn().execute(f"SELECT * FROM ({sql}) ORDER BY bucket_ts", args)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise StoreError(f"sqlite energy read from {self.path} failed: {exc}") from exc
        if not per_cluster:
            return [EnergyTotal(*r) for r in cur]
        out = []
        for r in cur:
            cluster, name = r[1].split(SEP, 1)
            out.append(EnergyTotal(r[0], name, *r[2:], cluster=cluster))
        return out

    def energy_top(self, start_ts: float, end_ts: float, by: str,
                   kg_per_kwh: Mapping[tuple[str, int], float], limit: int,
                   per_cluster: bool = False) -> list[TopLine]:
        """The ``limit`` largest of ``by`` by energy, summed in SQL (a month has ~100,000
        job-hours) from the totals per cluster, then their hours priced with ``kg_per_kwh``
        of each (cluster, hour)."""
        sql, args = self._totals_sql(start_ts, end_ts, by, per_cluster=True)
        # The line's key: the cluster's and the name (a job), or the name alone (a user).
        key = "name" if per_cluster else f"substr(name, instr(name, '{SEP}') + 1)"
        conn = self._energy_conn()
        try:
            top = conn.execute(
                f"SELECT {key} AS k, sum(energy_j), sum(gpu_s), sum(idle_j), "
                f"sum(gpu_energy_j), sum(idle_s) "
                f"FROM ({sql}) GROUP BY k ORDER BY 2 DESC LIMIT ?", [*args, limit]).fetchall()
            if not top:
                return []
            marks = ",".join("?" * len(top))
            co2e = dict.fromkeys((t[0] for t in top), 0.0)
            for k, name, hour, energy in conn.execute(
                    f"SELECT {key} AS k, name, bucket_ts, energy_j FROM ({sql}) "
                    f"WHERE k IN ({marks})", [*args, *co2e]):
                cluster = name.split(SEP, 1)[0]
                co2e[k] += energy / J_PER_KWH * kg_per_kwh.get((cluster, hour), 0.0)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise StoreError(f"sqlite energy read from {self.path} failed: {exc}") from exc
        out = []
        for k, e, g, i, ge, i_s in top:
            cluster, name = k.split(SEP, 1) if per_cluster else ("", k)
            out.append(TopLine(name, e, co2e[k], g, i, ge, i_s, cluster))
        return out


def _kind(by: str, per_cluster: bool) -> str:
    return f"{by} per cluster" if per_cluster else by


def _live(by: str, marks: str, per_cluster: bool = False) -> str:
    """Totals per hour and ``by`` (per cluster: "<cluster>SEP<by>") of the rows of the
    hours in ``(marks)``."""
    gpu = "device GLOB 'gpu[0-9]*'"
    name = f"cluster || '{SEP}' || {by}" if per_cluster else by
    return (f"SELECT bucket_ts, {name} AS name, sum(energy_j) AS energy_j, "
            f"sum(idle_j) AS idle_j, "
            f"sum(CASE WHEN {gpu} THEN energy_j ELSE 0 END) AS gpu_energy_j, "
            f"sum(CASE WHEN {gpu} THEN seconds ELSE 0 END) AS gpu_s, sum(idle_s) AS idle_s, "
            f"sum(CASE WHEN {gpu} THEN missing_s ELSE 0 END) AS missing_s, "
            f"sum(over_tdp_s) AS over_tdp_s FROM energy WHERE bucket_ts IN ({marks}) "
            f"GROUP BY bucket_ts, {name}")
