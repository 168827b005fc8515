"""``fleetwatch backup``: a whole copy of a store that is being written (grow #1: ``cp`` of
a live store silently lacked every write since the last WAL checkpoint, a silence too)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from fleetwatch.backup import BackupError, backup
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_up import run_cli, start_up, stop, wait_for_samples
from tests.servers import free_port
from tests.store.helpers import frames

T0 = 1_763_800_000_000


def count(db: Path, table: str = "samples") -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


def settled(db: Path) -> None:
    """Ten samples in ``db``, once up has created its tables."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return wait_for_samples(db, 10)
        except StoreError:  # the file is there, its tables not yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_a_backup_while_a_writer_writes_holds_every_row_committed_before_it(
        tmp_path: Path) -> None:
    db, copy = tmp_path / "s.db", tmp_path / "copy.db"
    store = SqliteStore(db)
    for k in range(20):
        store.write(frames("c", T0 + k * 100_000, ticks=100, nodes=4, gpus=8))
    writing, written = threading.Event(), [20]

    def writer() -> None:
        w = SqliteStore(db)
        while not writing.is_set():
            w.write(frames("c", T0 + written[0] * 100_000, ticks=100, nodes=4, gpus=8))
            written[0] += 1
        w.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.3)
        committed = count(db)  # every row committed before the backup starts
        steps: list[tuple[int, int]] = []
        result = backup(str(db), str(copy), lambda done, total: steps.append((done, total)),
                        step_pages=64)
        after = count(db)
    finally:
        writing.set()
        thread.join()
    assert count(copy) >= committed > 0
    assert count(copy) <= after
    assert count(copy) % (4 * 10) == 0  # whole frames: 4 nodes x (8 GPUs, host, port)
    assert len(steps) > 10 and steps[-1][0] == steps[-1][1]  # progress, to the end
    conn = sqlite3.connect(copy)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # no -wal to carry
    conn.close()
    assert result.bytes == copy.stat().st_size


def test_an_existing_dest_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    db, copy = tmp_path / "s.db", tmp_path / "copy.db"
    SqliteStore(db).close()
    copy.write_text("keep me")
    with pytest.raises(BackupError, match="copy.db already exists: fleetwatch backup never "
                                          "overwrites a file"):
        backup(str(db), str(copy))
    assert copy.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name) == []


def test_backup_of_a_running_up_holds_the_silence_just_added(tmp_path: Path) -> None:
    db, copy = tmp_path / "live.db", tmp_path / "copy.db"
    proc = start_up(tmp_path, "--port", str(free_port()), "--speed", "200", "--store", str(db))
    try:
        settled(db)
        added = run_cli(tmp_path, "silence", "add", "node=node-000", "--for", "1d",
                        "--comment", "added while up runs", "--store", str(db))
        assert added.returncode == 0, added.stderr
        before = count(db)
        done = run_cli(tmp_path, "backup", str(copy), "--store", str(db))
        assert done.returncode == 0, done.stderr
        assert proc.poll() is None  # up goes on
    finally:
        code, out = stop(proc)
    assert code == 0, out
    assert f"backed up {db} to {copy}: " in done.stderr and " MB in " in done.stderr
    listed = run_cli(tmp_path, "silence", "list", "--store", str(copy))
    assert "added while up runs" in listed.stdout, listed
    assert count(copy) >= before
    again = run_cli(tmp_path, "backup", str(copy), "--store", str(db))
    assert again.returncode == 1 and "already exists" in again.stderr


def test_a_compact_backup_leaves_out_what_retention_freed(tmp_path: Path) -> None:
    db, copy, whole = tmp_path / "s.db", tmp_path / "compact.db", tmp_path / "whole.db"
    store = SqliteStore(db, raw_retention_h=1, rollup_retention_d=1 / 24)
    for k in range(20):
        store.write(frames("c", T0 + k * 100_000, ticks=100, nodes=4, gpus=8))
    store.maintain(T0 + 20 * 100_000 + 3_300_000)  # the oldest 1,700 s of 2,000 go
    kept = count(db)
    assert 0 < kept < 20 * 100 * 4 * 10
    backup(str(db), str(whole))
    result = backup(str(db), str(copy), compact=True)
    assert count(copy) == count(whole) == kept
    assert result.bytes < whole.stat().st_size * 0.5  # the freed pages are not copied
    conn = sqlite3.connect(copy)
    assert conn.execute("PRAGMA freelist_count").fetchone() == (0,)
    conn.close()


def test_a_folder_dest_takes_the_store_under_its_own_name_and_up_s_store_is_named(
        tmp_path: Path) -> None:
    """As cp does: DEST a folder is the copy's folder. Without --store, next to `up`'s
    fleetwatch-sim.db and no fleetwatch.db, the refusal names the file `up` keeps."""
    SqliteStore(tmp_path / "fleetwatch-sim.db").close()
    (tmp_path / "backups").mkdir()
    done = run_cli(tmp_path, "backup", "backups", "--store", "fleetwatch-sim.db")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "backups" / "fleetwatch-sim.db").is_file()
    missing = run_cli(tmp_path, "backup", "copy.db")
    assert missing.returncode == 1
    assert "fleetwatch-sim.db" in missing.stderr and not (tmp_path / "copy.db").exists()
