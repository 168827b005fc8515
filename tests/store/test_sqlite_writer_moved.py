"""The writer notices that its store's file left its path (grow #4): moved to a bigger
disk, renamed or deleted under a running ``up``/``process``, it went on writing into the
old file (or an unlinked one) and said "every frame sent was stored"."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from fleetwatch.pipeline.store.base import StoreLost
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.store.helpers import frames

T0 = 1_763_800_000_000


def rows(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    finally:
        conn.close()


def test_a_renamed_store_stops_the_writer_and_keeps_what_it_wrote(tmp_path: Path) -> None:
    db, moved = tmp_path / "live.db", tmp_path / "moved.db"
    store = SqliteStore(db)
    store.write(frames("c", T0, ticks=5))
    os.rename(db, moved)
    with pytest.raises(StoreLost) as lost:
        store.maintain(T0 + 10_000)  # each maintenance pass looks
    said = str(lost.value)
    assert f"the store {db} was moved, renamed, deleted or replaced" in said
    assert f"({db} no longer exists); writing stopped" in said
    assert "fleetwatch backup DEST" in said
    with pytest.raises(StoreLost):  # and every write after it, without writing
        store.write(frames("c", T0 + 10_000, ticks=5))
    assert store.lost == said
    store.close()
    assert not db.exists()  # nothing recreated under the old name
    if Path(f"{db}-wal").exists():  # as the message says: beside the renamed file
        os.rename(f"{db}-wal", f"{moved}-wal")
    assert rows(moved) == 5 * 2 * (2 + 1 + 1)  # 5 ticks x 2 nodes x (2 GPUs, host, port)


def test_a_store_replaced_by_another_file_is_named_so(tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    store = SqliteStore(db)
    store.write(frames("c", T0, ticks=2))
    os.rename(db, tmp_path / "old.db")
    SqliteStore(db).close()  # a new store put at the path
    store._checked_at = (0.0, 0.0)  # as if a second had passed since the last look
    with pytest.raises(StoreLost, match=r"now names another file than the one this process"):
        store.write(frames("c", T0 + 2_000, ticks=2))
    assert rows(db) == 0  # the new file got nothing


def test_a_store_in_place_is_looked_at_and_written(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.write(frames("c", T0, ticks=2))
    store.maintain(T0 + 5_000)
    store._checked_at = (0.0, 0.0)
    store.write(frames("c", T0 + 2_000, ticks=2))
    store.close()
    assert store.lost is None
    assert rows(tmp_path / "s.db") == 4 * 2 * 4
