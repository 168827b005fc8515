"""The embedded store: one SQLite file in WAL mode.

WAL lets a dashboard in another process (or thread) read while the processor
writes. Raw samples are keyed (ts, series) so that writes append at the end
of the B-tree; 1-minute rollups are keyed (series, ts) for long-range reads of
one series. Both are ``INSERT OR REPLACE``: writing a point twice keeps one.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Alert,
    AlertState,
    Annotation,
    Point,
    SeriesKey,
    StoreError,
    gpu_device,
)

MINUTE_MS = 60_000
# Spans longer than this are read from the 1-minute rollups.
RAW_SPAN_MS = 6 * 3600 * 1000
# Minutes younger than this are not rolled up yet: late points may still come.
ROLLUP_GRACE_MS = 2 * MINUTE_MS

_SCHEMA = """
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY, metric TEXT NOT NULL, cluster TEXT NOT NULL, rack TEXT NOT NULL,
    node TEXT NOT NULL, device TEXT NOT NULL, UNIQUE (metric, cluster, rack, node, device));
CREATE INDEX IF NOT EXISTS series_by_node ON series (node, metric);
CREATE TABLE IF NOT EXISTS samples (
    ts INTEGER NOT NULL, sid INTEGER NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (ts, sid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_1m (
    sid INTEGER NOT NULL, ts INTEGER NOT NULL, n INTEGER NOT NULL, sum REAL NOT NULL,
    min REAL NOT NULL, max REAL NOT NULL, PRIMARY KEY (sid, ts)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS alerts (
    id TEXT PRIMARY KEY, rule TEXT, severity TEXT, cluster TEXT, rack TEXT, node TEXT,
    device TEXT, state TEXT, started_ts REAL, updated_ts REAL, value REAL, message TEXT,
    fired_ts REAL, resolved_ts REAL);
CREATE INDEX IF NOT EXISTS alerts_by_state ON alerts (state, updated_ts);
CREATE TABLE IF NOT EXISTS annotations (
    kind TEXT, start_ts REAL, end_ts REAL, node TEXT, device TEXT, text TEXT,
    UNIQUE (kind, start_ts, node, device));
-- Minutes whose rollup must be recomputed from raw samples once they close.
CREATE TABLE IF NOT EXISTS dirty_minutes (minute INTEGER PRIMARY KEY);
"""


class SqliteStore:
    def __init__(self, path: str | Path, raw_retention_h: float = 14 * 24,
                 rollup_retention_d: float = 400, read_only: bool = False) -> None:
        self.path = str(path)
        self.raw_retention_ms = int(raw_retention_h * 3600 * 1000)
        self.rollup_retention_ms = int(rollup_retention_d * 86400 * 1000)
        self._read_only = read_only
        self._local = threading.local()
        self._devices: dict[tuple[str, str, str, str], dict[str, int]] = {}
        self._ids_lock = threading.Lock()
        if not read_only:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn().executescript(_SCHEMA)

    # connections: one per thread, since sqlite3 connections are not shareable
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._read_only:
                if not Path(self.path).exists():
                    raise StoreError(f"no store at {self.path}: run `fleetwatch up` or "
                                     "`fleetwatch simulate` first, or point store.path at one")
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       check_same_thread=False, timeout=30)
            else:
                conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
        return conn

    def _sids(self, f: Frame, device: str, metrics: Mapping[str, float]) -> dict[str, int]:
        """metric → series id for one device of one node; new series are created here."""
        ident = (f.cluster, f.rack, f.node, device)
        sids = self._devices.get(ident)
        if sids is None or not metrics.keys() <= sids.keys():
            with self._ids_lock:
                conn = self._conn()
                with conn:
                    conn.executemany(
                        "INSERT OR IGNORE INTO series (metric, cluster, rack, node, device) "
                        "VALUES (?, ?, ?, ?, ?)", [(m, *ident) for m in metrics])
                sids = dict(conn.execute(
                    "SELECT metric, id FROM series WHERE cluster = ? AND rack = ? AND node = ? "
                    "AND device = ?", ident).fetchall())
                self._devices[ident] = sids
        return sids

    def _columns(self, frames: Sequence[Frame]) -> tuple[list[int], list[int], list[float]]:
        """The frames as three parallel columns: timestamp (ms), series id, value."""
        ts_col: list[int] = []
        sid_col: list[int] = []
        val_col: list[float] = []
        sids_of = self._sids
        for f in frames:
            ts = int(round(f.ts * 1000))
            parts = [(gpu_device(g.index), g.metrics) for g in f.gpus]
            parts.append(("host", f.host.metrics))
            parts.extend((p.name, p.metrics) for p in f.host.ports)
            for device, metrics in parts:
                sids = sids_of(f, device, metrics)
                sid_col.extend([sids[m] for m in metrics])
                val_col.extend(metrics.values())
                ts_col.extend([ts] * len(metrics))
        return ts_col, sid_col, val_col

    def write(self, frames: Sequence[Frame]) -> int:
        ts, sid, value = self._columns(frames)
        if not ts:
            return 0
        conn = self._conn()
        try:
            with conn:
                conn.executemany("INSERT OR REPLACE INTO samples (ts, sid, value) "
                                 "VALUES (?, ?, ?)", zip(ts, sid, value))
                complete, dirty = _rollup(ts, sid, value)
                conn.executemany("INSERT OR REPLACE INTO rollup_1m (sid, ts, n, sum, min, max) "
                                 "VALUES (?, ?, ?, ?, ?, ?)", complete)
                conn.executemany("INSERT OR IGNORE INTO dirty_minutes VALUES (?)",
                                 [(m,) for m in dirty])
        except sqlite3.OperationalError as exc:
            raise StoreError(f"sqlite write to {self.path} failed: {exc}") from exc
        return len(ts)

    def write_alerts(self, alerts: Sequence[Alert]) -> None:
        if not alerts:
            return
        with self._conn() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO alerts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [(a.id, a.rule, a.severity, a.cluster, a.rack, a.node, a.device, a.state,
                  a.started_ts, a.updated_ts, a.value, a.message, a.fired_ts, a.resolved_ts)
                 for a in alerts])

    def write_annotations(self, annotations: Sequence[Annotation]) -> None:
        with self._conn() as conn:
            conn.executemany("INSERT OR REPLACE INTO annotations VALUES (?,?,?,?,?,?)",
                             [(a.kind, a.start_ts, a.end_ts, a.node, a.device, a.text)
                              for a in annotations])

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        rows = self._conn().execute(
            "SELECT s.metric, s.cluster, s.rack, s.node, s.device, x.ts, x.value "
            "FROM series s JOIN samples x ON x.sid = s.id "
            "WHERE s.metric = ? AND x.ts >= ? ORDER BY x.ts", (metric, since_ms)).fetchall()
        newest: dict[SeriesKey, Point] = {}
        for r in rows:  # ordered by time, so the last one of each series wins
            key = SeriesKey(*r[:5])
            newest[key] = (key, r[5], r[6])
        return sorted(newest.values(), key=lambda p: (p[0].node, p[0].device))

    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None) -> list[Point]:
        where, args = ["s.metric = ?"], [metric]
        if node is not None:
            where.append("s.node = ?")
            args.append(node)
        if device is not None:
            where.append("s.device = ?")
            args.append(device)
        cond = " AND ".join(where)
        if end_ms - start_ms > RAW_SPAN_MS:
            sql = (f"SELECT s.metric, s.cluster, s.rack, s.node, s.device, r.ts, r.sum / r.n "
                   f"FROM series s JOIN rollup_1m r ON r.sid = s.id "
                   f"WHERE {cond} AND r.ts >= ? AND r.ts < ? ORDER BY r.ts")
        else:
            sql = (f"SELECT s.metric, s.cluster, s.rack, s.node, s.device, x.ts, x.value "
                   f"FROM series s JOIN samples x ON x.sid = s.id "
                   f"WHERE {cond} AND x.ts >= ? AND x.ts < ? ORDER BY x.ts")
        rows = self._conn().execute(sql, (*args, start_ms, end_ms)).fetchall()
        return [(SeriesKey(*r[:5]), r[5], r[6]) for r in rows]

    def rollups(self, metric: str, start_ms: int, end_ms: int) -> list[tuple[SeriesKey, int, int,
                                                                           float, float, float]]:
        """(series, minute, count, sum, min, max) rows: for reports and checks."""
        rows = self._conn().execute(
            "SELECT s.metric, s.cluster, s.rack, s.node, s.device, r.ts, r.n, r.sum, r.min, r.max "
            "FROM series s JOIN rollup_1m r ON r.sid = s.id "
            "WHERE s.metric = ? AND r.ts >= ? AND r.ts < ? ORDER BY r.ts",
            (metric, start_ms, end_ms)).fetchall()
        return [(SeriesKey(*r[:5]), *r[5:]) for r in rows]

    def alerts(self, states: Sequence[AlertState] = ACTIVE_STATES,
               since_ts: float | None = None) -> list[Alert]:
        marks = ",".join("?" * len(states))
        sql = f"SELECT * FROM alerts WHERE state IN ({marks})"
        args: list[object] = list(states)
        if since_ts is not None:
            sql += " AND updated_ts >= ?"
            args.append(since_ts)
        rows = self._conn().execute(sql + " ORDER BY started_ts DESC", args).fetchall()
        return [Alert(*r) for r in rows]

    def annotations(self, start_ts: float, end_ts: float) -> list[Annotation]:
        rows = self._conn().execute(
            "SELECT * FROM annotations WHERE start_ts < ? AND (end_ts IS NULL OR end_ts >= ?) "
            "ORDER BY start_ts", (end_ts, start_ts)).fetchall()
        return [Annotation(*r) for r in rows]

    def maintain(self, now_ms: int) -> None:
        conn = self._conn()
        with conn:
            closed = now_ms - ROLLUP_GRACE_MS
            for (minute,) in conn.execute("SELECT minute FROM dirty_minutes WHERE minute < ?",
                                          (closed - MINUTE_MS,)).fetchall():
                conn.execute(
                    "INSERT OR REPLACE INTO rollup_1m (sid, ts, n, sum, min, max) "
                    "SELECT sid, ?, count(*), sum(value), min(value), max(value) "
                    "FROM samples WHERE ts >= ? AND ts < ? GROUP BY sid",
                    (minute, minute, minute + MINUTE_MS))
                conn.execute("DELETE FROM dirty_minutes WHERE minute = ?", (minute,))
            conn.execute("DELETE FROM samples WHERE ts < ?", (now_ms - self.raw_retention_ms,))
            conn.execute("DELETE FROM rollup_1m WHERE ts < ?",
                         (now_ms - self.rollup_retention_ms,))

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _rollup(ts_col: list[int], sid_col: list[int], value_col: list[float]
            ) -> tuple[list[tuple[int, int, int, float, float, float]], set[int]]:
    """1-minute aggregates of a batch: those it holds whole, and the minutes it may not.

    A node's frames arrive in order, so for each series only its first and last
    minute in a batch can be partial (the rest of them is in the batch before
    or after). Those are marked dirty and recomputed from the raw samples once
    the minute has closed; every other (series, minute) is complete here, and
    writing it again on a replay gives the same row.
    """
    ts = np.array(ts_col, dtype=np.int64)
    sid = np.array(sid_col, dtype=np.int64)
    value = np.array(value_col, dtype=np.float64)
    minute = ts - ts % MINUTE_MS
    order = np.lexsort((minute, sid))
    sid, minute, value = sid[order], minute[order], value[order]
    new_group = np.empty(len(sid), dtype=bool)
    new_group[0] = True
    new_group[1:] = (sid[1:] != sid[:-1]) | (minute[1:] != minute[:-1])
    starts = np.flatnonzero(new_group)
    g_sid, g_min = sid[starts], minute[starts]
    n = np.diff(np.append(starts, len(sid)))
    total = np.add.reduceat(value, starts)
    lo = np.minimum.reduceat(value, starts)
    hi = np.maximum.reduceat(value, starts)
    first_of_sid = np.ones(len(starts), dtype=bool)
    first_of_sid[1:] = g_sid[1:] != g_sid[:-1]
    last_of_sid = np.ones(len(starts), dtype=bool)
    last_of_sid[:-1] = g_sid[1:] != g_sid[:-1]
    edge = first_of_sid | last_of_sid
    dirty = set(g_min[edge].tolist())
    keep = ~edge
    complete = list(zip(g_sid[keep].tolist(), g_min[keep].tolist(), n[keep].tolist(),
                        total[keep].tolist(), lo[keep].tolist(), hi[keep].tolist()))
    return complete, dirty
