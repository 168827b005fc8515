"""A store that is damaged, on a read-only file system or on a full disk is named for
what it is (never "not a fleetwatch store", never a traceback) by `alerts`, `silence
list`, `up` and `up --keep`; one classifier (``sqlite_errors``) says which it is.

The read-only and full-disk cases mount a small tmpfs, as an operator's snapshot mount
or a filled volume would be: they are skipped where mounting is not allowed."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.sqlite_errors import describe, kind
from tests.servers import free_port

START = 1_763_800_000.0
PAGE = 4096


def make_store(path: Path, steps: int = 400) -> None:
    store = SqliteStore(path)
    store.write_alerts([Alert("r/n/gpu0/1", "gpu_temp_high", "critical", "c", "rk", "n",
                              "gpu0", "firing", START, START, 96.0, "hot",
                              fired_ts=START)])
    sim = FleetSim(SimParams(nodes=4, gpus=8), START)
    for _ in range(steps):
        sim.step()
        store.write(sim.frames())
    store.maintain(int(sim.ts * 1000) + 120_000)  # minute rollups
    store.close()
    conn = sqlite3.connect(path)  # one file, as a copy or a backup would be
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for extra in ("-wal", "-shm"):
        Path(f"{path}{extra}").unlink(missing_ok=True)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleetwatch.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "mnt"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


# -- the classifier, on real errors --
def test_each_error_is_named_for_what_it_is(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    make_store(db, 50)
    with open(db, "r+b") as f:  # truncated to half, as a copy cut short would be
        f.truncate(os.path.getsize(db) // 2)
    with pytest.raises(sqlite3.DatabaseError) as malformed:
        sqlite3.connect(db).execute("SELECT count(*) FROM samples").fetchall()
    assert kind(malformed.value) == "damaged"
    said = describe(str(db), malformed.value)
    assert "is damaged" in said and ".recover" in said and "not a fleetwatch" not in said
    assert kind(OSError(errno.EROFS, "Read-only file system")) == "read-only"
    full = describe(str(db), OSError(errno.ENOSPC, "No space left on device"))
    assert f"the disk holding {db} is full" in full and "MiB free" in full


def test_alerts_and_up_keep_on_a_truncated_store_say_it_is_damaged(tmp_path: Path) -> None:
    db = tmp_path / "trunc.db"
    make_store(db)
    with open(db, "r+b") as f:
        f.truncate(os.path.getsize(db) // 2)
    listed = cli("alerts", "--store", str(db), cwd=tmp_path)
    assert listed.returncode == 1
    assert "is damaged" in listed.stderr and "not a fleetwatch" not in listed.stderr
    kept = cli("up", "--keep", "--store", str(db), "--port", str(free_port()), cwd=tmp_path)
    assert kept.returncode == 2, kept.stderr
    assert "is damaged" in kept.stderr and ".recover" in kept.stderr
    assert "Traceback" not in kept.stderr


def test_alerts_warn_of_damage_their_own_read_did_not_meet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "a.db"
    make_store(db)
    conn = sqlite3.connect(db)  # a leaf of minute rollups, which `alerts` never reads
    leaves = [n for (n,) in conn.execute("SELECT pageno FROM dbstat WHERE name = "
                                         "'rollup_1m' AND pagetype = 'leaf' ORDER BY path")]
    conn.close()
    with open(db, "r+b") as f:  # random bytes over it, as a bad sector would leave
        f.seek((leaves[len(leaves) // 2] - 1) * PAGE)
        f.write(os.urandom(PAGE))
    code = main(["alerts", "--store", str(db)])
    captured = capsys.readouterr()
    assert code == 0 and "gpu_temp_high" in captured.out, captured.err  # still listed
    assert "WARNING: the store" in captured.err and "is damaged" in captured.err
    assert "may be incomplete" in captured.err


def test_a_store_on_a_read_only_mount_is_listed_and_up_says_read_only(
        tmp_path: Path, tmpfs: Path) -> None:
    db = tmpfs / "sim.db"
    make_store(db, 20)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    listed = cli("alerts", "--store", str(db), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "gpu_temp_high" in listed.stdout
    silences = cli("silence", "list", "--store", str(db), cwd=tmp_path)
    assert silences.returncode == 0, silences.stderr
    kept = cli("up", "--keep", "--store", str(db), "--port", str(free_port()), cwd=tmp_path)
    assert kept.returncode == 2
    assert f"store {db}" in kept.stderr and "read-only file system" in kept.stderr
    assert "Traceback" not in kept.stderr


def test_up_on_a_full_disk_names_the_path_and_the_free_space(tmp_path: Path,
                                                             tmpfs: Path) -> None:
    with open(tmpfs / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    db = tmpfs / "full.db"
    started = cli("up", "--store", str(db), "--port", str(free_port()), cwd=tmp_path)
    assert started.returncode == 2
    assert f"the disk holding {db} is full" in started.stderr
    assert "MiB free" in started.stderr and "Traceback" not in started.stderr
