"""The energy ledger in the embedded SQLite store (mixed into ``SqliteStore``).

Two tables beside the samples: ``energy`` (one row per hour bucket, device
and owner, replaced on rewrite) and ``energy_state`` (the integrator's
watermark per device), written in one transaction so that a crash leaves
both old or both new.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.ledger import (
    TOTAL_KEYS,
    DeviceState,
    EnergyRow,
    EnergyTotal,
    bucket_floor,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS energy (
    bucket_ts INTEGER NOT NULL, cluster TEXT NOT NULL, rack TEXT NOT NULL, node TEXT NOT NULL,
    device TEXT NOT NULL, job TEXT NOT NULL, user TEXT NOT NULL, team TEXT NOT NULL,
    energy_j REAL NOT NULL, idle_j REAL NOT NULL, seconds REAL NOT NULL, idle_s REAL NOT NULL,
    missing_s REAL NOT NULL, over_tdp_s REAL NOT NULL,
    PRIMARY KEY (bucket_ts, cluster, node, device, job, user, team)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS energy_by_node ON energy (cluster, node, bucket_ts);
CREATE TABLE IF NOT EXISTS energy_state (
    cluster TEXT NOT NULL, node TEXT NOT NULL, device TEXT NOT NULL, ts REAL NOT NULL,
    power_w REAL, counter_j REAL, PRIMARY KEY (cluster, node, device)) WITHOUT ROWID;
"""


class SqliteEnergy:
    """Needs the host class's ``_conn()`` (a per-thread connection) and ``path``."""

    path: str
    _energy_ready = False

    if TYPE_CHECKING:
        def _conn(self) -> sqlite3.Connection: ...  # provided by SqliteStore

    def _energy_conn(self) -> sqlite3.Connection:
        conn = self._conn()
        if not self._energy_ready:
            try:
                conn.executescript(_SCHEMA)
            except sqlite3.OperationalError as exc:
                if "readonly" not in str(exc):
                    raise StoreError(f"sqlite {self.path}: {exc}") from exc
            self._energy_ready = True
        return conn

    def write_energy(self, rows: Sequence[EnergyRow], states: Sequence[DeviceState]) -> None:
        conn = self._energy_conn()
        try:
            with conn:
                conn.executemany("INSERT OR REPLACE INTO energy VALUES "
                                 "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
                conn.executemany("INSERT OR REPLACE INTO energy_state VALUES (?,?,?,?,?,?)",
                                 states)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"sqlite energy write to {self.path} failed: {exc}") from exc

    def energy_state(self, cluster: str, node: str, at_ts: float = 0.0
                     ) -> tuple[list[DeviceState], list[EnergyRow]]:
        conn = self._energy_conn()
        states = [DeviceState(*r) for r in conn.execute(
            "SELECT * FROM energy_state WHERE cluster = ? AND node = ?", (cluster, node))]
        if not states:
            return [], []
        since = bucket_floor(min(s.ts for s in states))
        rows = [EnergyRow(*r) for r in conn.execute(
            "SELECT * FROM energy WHERE cluster = ? AND node = ? AND bucket_ts >= ?",
            (cluster, node, since))]
        return states, rows

    def energy(self, start_ts: float, end_ts: float, cluster: str | None = None,
               node: str | None = None) -> list[EnergyRow]:
        sql = "SELECT * FROM energy WHERE bucket_ts >= ? AND bucket_ts < ?"
        args: list[object] = [start_ts, end_ts]
        if cluster is not None:
            sql += " AND cluster = ?"
            args.append(cluster)
        if node is not None:
            sql += " AND node = ?"
            args.append(node)
        try:
            cur = self._energy_conn().execute(sql + " ORDER BY bucket_ts", args)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # a store written before the ledger existed
            raise StoreError(f"sqlite energy read from {self.path} failed: {exc}") from exc
        return [EnergyRow(*r) for r in cur]

    def energy_totals(self, start_ts: float, end_ts: float, by: str) -> list[EnergyTotal]:
        if by not in TOTAL_KEYS:
            raise ValueError(f"energy_totals by {by!r}: one of {', '.join(TOTAL_KEYS)}")
        gpu = "device GLOB 'gpu[0-9]*'"
        sql = (f"SELECT bucket_ts, {by}, sum(energy_j), sum(idle_j), "
               f"sum(CASE WHEN {gpu} THEN energy_j ELSE 0 END), "
               f"sum(CASE WHEN {gpu} THEN seconds ELSE 0 END), sum(idle_s), "
               f"sum(CASE WHEN {gpu} THEN missing_s ELSE 0 END), sum(over_tdp_s) "
               f"FROM energy WHERE bucket_ts >= ? AND bucket_ts < ? "
               f"GROUP BY bucket_ts, {by} ORDER BY bucket_ts")
        try:
            cur = self._energy_conn().execute(sql, (start_ts, end_ts))
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise StoreError(f"sqlite energy read from {self.path} failed: {exc}") from exc
        return [EnergyTotal(*r) for r in cur]
