"""Opens that meet another process's lock on the store. An open of an earlier version's
store that meets another process converting its events table waits for the conversion (as
long as one may take), says so, and then finds it done; a lock that never ends ends in
words; an open of a current store takes no lock at all; the switch of a file not yet in
WAL mode waits for another's lock rather than failing at once.

The other process is a connection holding the file's write lock (``BEGIN IMMEDIATE``, as
the converter does) until the opener says it waits: no race with the clock decides the
outcome."""

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
RETRYING = "switching {} to WAL mode met another connection's lock"


class _Said(logging.Handler):
    """The store's log lines, and an event set once the opener says it waits."""

    def __init__(self, db: Path) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.waiting = threading.Event()
        self._db = db

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if record.getMessage().startswith((WAITING.format(self._db),
                                           RETRYING.format(self._db))):
            self.waiting.set()


@pytest.fixture
def old_store(tmp_path: Path) -> Iterator[tuple[Path, _Said]]:
    """A store of an earlier version in WAL mode (as fleetwatch left it), and what the
    store's modules log meanwhile (``_open_with_the_lock_held`` turns the file back to a
    rollback journal, as ``_old_file`` makes it, for the WAL switch)."""
    db = tmp_path / "old.db"
    _old_file(db, extra=1000)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    said = _Said(db)
    logger = logging.getLogger("fleetwatch.pipeline.store")
    level = logger.level
    logger.addHandler(said)
    logger.setLevel(logging.DEBUG)
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


def _open_with_the_lock_held(db: Path, said: _Said, busy_timeout_s: float) -> None:
    """Open the store while another connection holds its write lock, let go only once the
    opener says it waits (or has given up); the opener's error, if any, is raised."""
    holder = _holding_the_write_lock(db)
    failed: list[BaseException] = []

    def open_store() -> None:
        try:
            SqliteStore(db, busy_timeout_s=busy_timeout_s).close()
        except BaseException as exc:  # noqa: BLE001 - what the worker would die of
            failed.append(exc)

    opener = threading.Thread(target=open_store)
    opener.start()
    while opener.is_alive() and not said.waiting.wait(0.05):
        pass
    holder.execute("ROLLBACK")
    holder.close()
    opener.join(timeout=60)
    assert not opener.is_alive()
    if failed:
        raise failed[0]


def test_an_open_meeting_a_conversion_waits_past_its_busy_timeout_and_says_so(
        old_store: tuple[Path, _Said]) -> None:
    """The second worker of ``process --workers 2`` opening while the first converts: its
    busy timeout (here 0.2 s, 30 s by default) is shorter than the conversion; it died
    in its schema setup with 'database is locked'."""
    db, said = old_store
    _open_with_the_lock_held(db, said, busy_timeout_s=0.2)
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


def test_the_switch_to_wal_mode_waits_for_another_connections_lock(
        old_store: tuple[Path, _Said]) -> None:
    """A file not in WAL mode (a new store two workers create at once, an old file in
    rollback-journal mode): switching it needs the file to itself, and SQLite answered
    'database is locked' at once, not after the busy timeout, while another connection
    held its write lock or switched it too (``process --workers 2`` on such a file: one
    worker died in its schema setup)."""
    db, said = old_store
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    _open_with_the_lock_held(db, said, busy_timeout_s=30)
    assert [line for line in said.lines if line.startswith("switching")] == [
        RETRYING.format(db) + "; trying again for up to 30 s"]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    layout, count = _layout_and_count(db)
    assert layout.endswith("code, value, ts)) WITHOUT ROWID") and count == 1001


@pytest.mark.parametrize("journal", ["DELETE", "WAL"])
def test_a_lock_held_past_the_busy_timeout_of_an_open_ends_in_words(
        tmp_path: Path, journal: str) -> None:
    """Another process holding the write lock of a store being opened (a new store being
    created: its switch to WAL mode, or its tables) past the busy timeout: the open stops
    with what holds it and what to do, not 'sqlite schema setup ... database is locked'."""
    db = tmp_path / "s.db"
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE other (x)")  # a store being created: none of its tables yet
    conn.commit()
    conn.close()
    holder = _holding_the_write_lock(db)
    try:
        with pytest.raises(StoreError) as raised:
            SqliteStore(db, busy_timeout_s=0.3)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    text = str(raised.value)
    assert text.startswith(f"the store {db} stayed locked by another process for 0.3 s "
                           "while this one waited to open it")
    assert f"fuser -v {db}" in text and "start this one again" in text
