"""Events of one GPU and code a few microseconds apart are distinct events: the SQLite
store keeps each (a burst of XID 13 from the kernel log), and a file made by an earlier
version, keyed by the millisecond, is migrated on open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.sqlite import SqliteStore

T = 1_700_000_000.283302
# The real burst's spacing: 16 XID 13 within 1.9 ms (.283302 ... .285147).
BURST = [Event(T + k * 0.000123, "xid", "c", "r", "n1", "gpu0", code=13) for k in range(16)]


def _count(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT COUNT(*) FROM events WHERE kind = 'xid'").fetchone()[0]
    finally:
        conn.close()


def test_sixteen_xids_within_two_milliseconds_are_sixteen_rows(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = SqliteStore(db)
    store.write_events(BURST)
    store.write_events(BURST[5:9])  # a batch written again: still kept once
    assert len(store.events(T - 1, T + 1, kinds=["xid"])) == 16
    [group] = store.event_groups(T - 1, T + 1, "n1", ["xid"])
    assert group.count == 16
    store.close()
    assert _count(db) == 16


def test_a_file_keyed_by_the_millisecond_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)  # the events table of earlier versions
    conn.execute(
        "CREATE TABLE events (ts_ms INTEGER NOT NULL, ts REAL NOT NULL, kind TEXT NOT NULL, "
        "cluster TEXT NOT NULL, rack TEXT NOT NULL, node TEXT NOT NULL, device TEXT NOT NULL, "
        "code INTEGER NOT NULL, value TEXT NOT NULL, text TEXT NOT NULL, PRIMARY KEY (ts_ms, "
        "kind, cluster, rack, node, device, code, value)) WITHOUT ROWID")
    conn.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)",
                 (round((T - 5) * 1000), T - 5, "xid", "c", "r", "n1", "gpu0", 79, "", "old"))
    conn.commit()
    conn.close()
    store = SqliteStore(db)
    store.write_events(BURST)
    got = store.events(T - 10, T + 1, kinds=["xid"])
    assert [e.code for e in got] == [79] + [13] * 16 and got[0].text == "old"
    store.close()
    assert _count(db) == 17
