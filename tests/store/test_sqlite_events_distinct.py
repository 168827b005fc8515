"""Events of one GPU and code a few microseconds apart are distinct events: the SQLite
store keeps each (a burst of XID 13 from the kernel log), and a file made by an earlier
version, keyed by the millisecond, is migrated on open."""

from __future__ import annotations

import logging
import multiprocessing
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

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


def _old_file(db: Path, extra: int = 0) -> None:
    """A store of earlier versions: its events keyed by the millisecond; one XID 79 of
    T - 5, and ``extra`` more events (to make its conversion take a while)."""
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE events (ts_ms INTEGER NOT NULL, ts REAL NOT NULL, kind TEXT NOT NULL, "
        "cluster TEXT NOT NULL, rack TEXT NOT NULL, node TEXT NOT NULL, device TEXT NOT NULL, "
        "code INTEGER NOT NULL, value TEXT NOT NULL, text TEXT NOT NULL, PRIMARY KEY (ts_ms, "
        "kind, cluster, rack, node, device, code, value)) WITHOUT ROWID")
    conn.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)",
                 (round((T - 5) * 1000), T - 5, "xid", "c", "r", "n1", "gpu0", 79, "", "old"))
    conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)",
                     ((k, k / 1000, "gpu_state", "c", "r", f"n{k % 97}", "gpu0", 0, "ok",
                       "") for k in range(1, extra + 1)))
    conn.commit()
    conn.close()


def test_a_file_keyed_by_the_millisecond_is_migrated_and_keeps_its_rows(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "old.db"
    _old_file(db)
    with caplog.at_level(logging.INFO):
        store = SqliteStore(db)
    # The pause (9 s for 2M events) is said before and after, with the file and the time.
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == (f"converting the events table of {db} to the new layout (1 events); "
                       "other writers of this store wait until it is done")
    assert re.fullmatch(rf"converted the events table of {re.escape(str(db))} \(1 events\) "
                        r"in \d+\.\d s", said[1])
    store.write_events(BURST)
    got = store.events(T - 10, T + 1, kinds=["xid"])
    assert [e.code for e in got] == [79] + [13] * 16 and got[0].text == "old"
    store.close()
    assert _count(db) == 17


def _open_after(db: str, start: Any, said: Any) -> None:
    start.wait()
    try:
        SqliteStore(db).close()
    except Exception as exc:  # noqa: BLE001 - what the worker would have died of
        said.put(f"{type(exc).__name__}: {exc}")
        return
    said.put("")


def test_two_processes_opening_an_old_file_at_once_both_open_it(tmp_path: Path) -> None:
    """``process --workers 2`` on an old store: both workers open it at the same moment;
    one converts the events table, the other waits for it and finds it done (it died
    with 'no such table: events_keyed')."""
    db = tmp_path / "old.db"
    _old_file(db, extra=150_000)
    ctx = multiprocessing.get_context("fork")
    start, said = ctx.Barrier(2), ctx.Queue()
    workers = [ctx.Process(target=_open_after, args=(str(db), start, said)) for _ in range(2)]
    for w in workers:
        w.start()
    errors = [said.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    assert errors == ["", ""]
    conn = sqlite3.connect(db)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE "
                                             "type = 'table' AND name LIKE 'events%'")]
        layout = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
        assert tables == ["events"] and "value, ts)" in layout[0].replace("\n", " ")
        assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 150_001
    finally:
        conn.close()
