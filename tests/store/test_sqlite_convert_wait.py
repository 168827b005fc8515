"""An open of an earlier version's store that meets another process converting its events
table waits for the conversion (as long as one may take), says so, and then finds it done;
a lock that never ends ends in words; an open of a current store takes no lock at all.

The other process is a connection holding the file's write lock (``BEGIN IMMEDIATE``, as
the converter does) until the test lets it go: no race with the clock decides the outcome.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.pipeline.store import sqlite_records
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.store.test_sqlite_events_distinct import _old_file

WAITING = "waiting for another process converting the events table of {}"


class _Said(logging.Handler):
    """The store's log lines, and an event set once the opener says it waits."""

    def __init__(self, db: Path) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.waiting = threading.Event()
        self._db = db

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if record.getMessage().startswith(WAITING.format(self._db)):
            self.waiting.set()


@pytest.fixture
def old_store(tmp_path: Path) -> Iterator[tuple[Path, _Said]]:
    """A store of an earlier version in WAL mode (as fleetwatch left it), and what the
    store's modules log meanwhile."""
    db = tmp_path / "old.db"
    _old_file(db, extra=1000)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    said = _Said(db)
    logger = logging.getLogger("fleetwatch.pipeline.store")
    level = logger.level
    logger.addHandler(said)
    logger.setLevel(logging.INFO)
    yield db, said
    logger.removeHandler(said)
    logger.setLevel(level)


def _holding_the_write_lock(db: Path) -> sqlite3.Connection:
    """Another process converting the file: its write lock held until the test ends it."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def _layout_and_count(db: Path) -> tuple[str, int]:
    conn = sqlite3.connect(db)
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
        return " ".join(sql.split()), conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    finally:
        conn.close()


def test_an_open_meeting_a_conversion_waits_past_its_busy_timeout_and_says_so(
        old_store: tuple[Path, _Said]) -> None:
    """The second worker of ``process --workers 2`` opening while the first converts: its
    busy timeout (here 0.2 s, 30 s by default) is shorter than the conversion; it died
    in its schema setup with 'database is locked'."""
    db, said = old_store
    holder = _holding_the_write_lock(db)
    failed: list[BaseException] = []

    def open_store() -> None:
        try:
            SqliteStore(db, busy_timeout_s=0.2).close()
        except BaseException as exc:  # noqa: BLE001 - what the worker would die of
            failed.append(exc)

    opener = threading.Thread(target=open_store)
    opener.start()
    # The lock is let go only once the opener says it waits, or has given up.
    while opener.is_alive() and not said.waiting.wait(0.05):
        pass
    holder.execute("ROLLBACK")
    holder.close()
    opener.join(timeout=60)
    assert not opener.is_alive()
    assert failed == []
    waits = [line for line in said.lines if line.startswith(WAITING.format(db))]
    assert len(waits) == 1
    assert said.lines.index(waits[0]) < next(
        i for i, line in enumerate(said.lines) if line.startswith("converting the events"))
    layout, count = _layout_and_count(db)
    assert layout.endswith("code, value, ts)) WITHOUT ROWID") and count == 1001


def test_a_lock_held_past_the_conversion_wait_ends_in_words(
        old_store: tuple[Path, _Said], monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that holds the store's write lock and never lets it go (stuck): the
    opener waits the conversion's wait (here 0.5 s, 10 minutes by default), not its busy
    timeout, then stops with what is wrong and what to do."""
    db, said = old_store
    monkeypatch.setattr(sqlite_records, "_CONVERT_WAIT_S", 0.5)
    holder = _holding_the_write_lock(db)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError) as raised:
            SqliteStore(db, busy_timeout_s=0.1)
        waited = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    text = str(raised.value)
    assert text.startswith(f"the store {db} stayed locked by another process for 0.5 s")
    assert f"fuser -v {db}" in text and "start this one again" in text
    assert waited >= 0.5
    assert [line for line in said.lines if line.startswith("waiting")] == [
        WAITING.format(db) + " (up to 0.5 s)"]
    layout, count = _layout_and_count(db)  # left as it was: converted by the next opener
    assert layout.endswith("code, value)) WITHOUT ROWID") and count == 1001


def test_an_open_of_a_current_store_takes_no_lock_and_says_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The usual open is not slowed by the wait: with another writer holding the lock, a
    store of this version opens at once (its schema setup writes nothing)."""
    db = tmp_path / "s.db"
    SqliteStore(db).close()
    holder = _holding_the_write_lock(db)
    try:
        started = time.monotonic()
        with caplog.at_level(logging.INFO):
            store = SqliteStore(db, busy_timeout_s=30)
        opened_in = time.monotonic() - started
        store.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert opened_in < 5  # not the 30 s busy timeout
    assert caplog.records == []
