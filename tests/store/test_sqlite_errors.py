"""SQLite failures reach the processor as store errors, never as sqlite3 exceptions
(which killed its writer thread: a locked database in write_alerts or maintain)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from fleetwatch.pipeline.store.base import Alert, Annotation, Event, StoreError, StoreRejected
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.store.helpers import frames, minute_ago


def _alert() -> Alert:
    return Alert("a/1", "gpu_temp", "critical", "c", "r", "n", "gpu0", "firing", 1.0, 2.0,
                 91.0, "hot", evidence={"gpu_temp_c": 91.0})


def test_a_locked_database_is_a_transient_store_error_in_every_write(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    store = SqliteStore(db, busy_timeout_s=0.1)
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holding the write lock
    try:
        calls = {
            "write": lambda: store.write(frames("c", minute_ago(5), 2)),
            "write_alerts": lambda: store.write_alerts([_alert()]),
            "write_events": lambda: store.write_events([Event(1.0, "xid", "c", "r", "n",
                                                              "gpu0", code=79)]),
            "write_annotations": lambda: store.write_annotations([Annotation(
                "fault", 1.0, None, "n", "gpu0", "fan")]),
            "maintain": lambda: store.maintain(minute_ago(0)),
        }
        for name, call in calls.items():
            started = time.monotonic()
            with pytest.raises(StoreError, match="locked") as raised:
                call()
            assert not isinstance(raised.value, sqlite3.Error), name
            assert time.monotonic() - started < 5, name
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    store.write_alerts([_alert()])  # the lock is gone: the same calls succeed
    store.maintain(minute_ago(0))
    assert store.alerts() == [_alert()]
    store.close()


def test_a_value_sqlite_cannot_take_is_a_permanent_refusal(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    huge = Event(1.0, "xid", "c", "r", "n", "gpu0", code=1 << 70)  # past SQLite's int64
    with pytest.raises(StoreRejected, match="event write"):
        store.write_events([huge])
    store.close()


def test_alert_columns_follow_the_dataclass_and_old_files_are_carried_over(
        tmp_path: Path) -> None:
    """A file of the earlier layout (alerts keyed by id alone, no evidence or action) opens,
    and its alerts come back with the new fields at their defaults."""
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript("""
        CREATE TABLE alerts (id TEXT PRIMARY KEY, rule TEXT, severity TEXT, cluster TEXT,
            rack TEXT, node TEXT, device TEXT, state TEXT, started_ts REAL, updated_ts REAL,
            value REAL, message TEXT, fired_ts REAL, resolved_ts REAL);
        INSERT INTO alerts VALUES ('a/1', 'gpu_temp', 'critical', 'c', 'r', 'n', 'gpu0',
            'firing', 1.0, 2.0, 91.0, 'hot', 1.5, NULL);""")
    conn.commit()
    conn.close()
    store = SqliteStore(db)
    [alert] = store.alerts()
    assert alert == Alert("a/1", "gpu_temp", "critical", "c", "r", "n", "gpu0", "firing", 1.0,
                          2.0, 91.0, "hot", fired_ts=1.5)
    store.close()


def test_a_read_only_reader_of_an_older_file_sees_no_events_rather_than_an_error(
        tmp_path: Path) -> None:
    db = tmp_path / "older.db"
    conn = sqlite3.connect(db)  # a file no writer of this version has opened yet: its first
    conn.execute("CREATE TABLE samples (ts INTEGER NOT NULL, did INTEGER NOT NULL, "  # tables
                 "layout INTEGER NOT NULL, vals BLOB NOT NULL, PRIMARY KEY (ts, did))")
    conn.commit()
    conn.close()
    reader = SqliteStore(db, read_only=True)
    assert reader.events(0, 2e9) == [] and reader.alerts() == []
    reader.close()
