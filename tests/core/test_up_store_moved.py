"""A store moved under a running ``up`` stops it, non-zero, naming the path (grow #4): it
went on writing into the moved (or unlinked) file and ended with "every frame sent was
stored; store closed (PATH)" for a path that no longer existed."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from tests.core.test_backup import settled
from tests.core.test_up import start_up, stop
from tests.servers import free_port


def test_renaming_the_store_under_up_stops_it_and_says_so(tmp_path: Path) -> None:
    db, moved = tmp_path / "live.db", tmp_path / "moved.db"
    proc = start_up(tmp_path, "--port", str(free_port()), "--speed", "200", "--store", str(db))
    try:
        settled(db)
        os.rename(db, moved)
        out, _ = proc.communicate(timeout=60)  # stops by itself, within a second or so
        code = proc.returncode
    finally:
        if proc.poll() is None:
            code, out = stop(proc)
    assert code == 1, out
    assert f"the store {db} was moved, renamed, deleted or replaced" in out, out
    assert "every frame sent was stored" not in out and f"store closed ({db})" not in out
    assert f"the store's file is no longer at {db}" in out
    assert "Traceback" not in out
    assert not db.exists()  # no new empty store made under the old name
    if Path(f"{db}-wal").exists():
        os.rename(f"{db}-wal", f"{moved}-wal")
    conn = sqlite3.connect(moved)
    assert conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] > 0
    conn.close()
