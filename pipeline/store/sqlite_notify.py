"""The SQLite store's record of notifications (``Notification``): one row per alert
change per notifying sink, written by the processor's notifier as it decides, read by
``fleetwatch alerts`` and ``fleetwatch timeline``. The table is created on open (a file of
an earlier version gains it); a read-only reader of a file without it reads none."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import astuple, fields

from fleetwatch.pipeline.store.base import Notification
from fleetwatch.pipeline.store.sqlite_records import guarded

_COLUMNS = [f.name for f in fields(Notification)]

NOTIFY_SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    ts REAL NOT NULL, sent_ts REAL NOT NULL, sink TEXT NOT NULL, alert_id TEXT NOT NULL,
    rule TEXT NOT NULL, severity TEXT NOT NULL, cluster TEXT NOT NULL, rack TEXT NOT NULL,
    node TEXT NOT NULL, device TEXT NOT NULL, state TEXT NOT NULL, outcome TEXT NOT NULL,
    muted_by TEXT NOT NULL,
    PRIMARY KEY (alert_id, sink, ts, state, outcome, muted_by));
CREATE INDEX IF NOT EXISTS notifications_by_ts ON notifications (ts);
"""


class SqliteNotifications:
    """Needs the host class's ``_conn()`` (a per-thread connection) and ``path``."""

    path: str
    _conn: Callable[[], sqlite3.Connection]

    @guarded("notification write")
    def write_notifications(self, notes: Sequence[Notification]) -> None:
        """Add notifications; one written again (a retried write) is kept once."""
        if not notes:
            return
        marks = ",".join("?" * len(_COLUMNS))
        with self._conn() as conn:
            conn.executemany(f"INSERT OR IGNORE INTO notifications ({', '.join(_COLUMNS)}) "
                             f"VALUES ({marks})", [astuple(n) for n in notes])

    @guarded("notification read")
    def notifications(self, start_ts: float, end_ts: float,
                      alert_ids: Sequence[str] | None = None) -> list[Notification]:
        """Notifications of stream time in [start, end), oldest first; of these alerts
        only where given."""
        sql = (f"SELECT {', '.join(_COLUMNS)} FROM notifications "
               "WHERE ts >= ? AND ts < ?")
        args: list[object] = [start_ts, end_ts]
        if alert_ids is not None:
            if not alert_ids:
                return []
            sql += f" AND alert_id IN ({','.join('?' * len(alert_ids))})"
            args += list(alert_ids)
        rows = self._conn().execute(sql + " ORDER BY ts, sent_ts, sink, alert_id", args).fetchall()
        return [Notification(*r) for r in rows]
