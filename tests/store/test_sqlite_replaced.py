"""A read-only store (the dashboard's) follows its path: a store file removed or replaced
under a running reader is seen by every thread, within about a second."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from fleetwatch.pipeline.store import sqlite_file
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.store.helpers import frames

T0 = 1_763_800_000_000


def make(db: Path, nodes: int, gpus: int) -> None:
    writer = SqliteStore(db)
    writer.write(frames("c", T0, ticks=5, nodes=nodes, gpus=gpus))
    writer.close()


def remove(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def gpus_seen(store: SqliteStore) -> int:
    return len(store.latest("gpu_temp_c", 0))


def in_thread(fn):  # a server thread with its own connection
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except StoreError as exc:
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0]


class Worker:
    """A long-lived thread, like one of waitress's: it keeps its connection between calls."""

    def __init__(self) -> None:
        self._jobs: list = []
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._jobs)
                fn, box = self._jobs.pop()
            try:
                box.append(fn())
            except StoreError as exc:
                box.append(exc)
            with self._cv:
                self._cv.notify_all()

    def __call__(self, fn):
        box: list = []
        with self._cv:
            self._jobs.append((fn, box))
            self._cv.notify_all()
            self._cv.wait_for(lambda: box, timeout=10)
        return box[0]


@pytest.fixture(autouse=True)
def fast_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_file, "_FILE_CHECK_S", 0.2)


def test_a_replaced_store_is_read_by_every_thread(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    make(db, nodes=4, gpus=8)
    reader = SqliteStore(db, read_only=True)
    workers = [Worker(), Worker()]
    assert [w(lambda: gpus_seen(reader)) for w in workers] == [32, 32]
    remove(db)
    make(db, nodes=2, gpus=4)  # different devices, ids and layouts
    time.sleep(0.3)
    assert [w(lambda: gpus_seen(reader)) for w in workers] == [8, 8]
    assert {p[0].node for p in workers[0](lambda: reader.latest("gpu_temp_c", 0))} == {
        "node-0", "node-1"}
    assert workers[1](lambda: reader.range("gpu_power_w", T0, T0 + 10_000, node="node-1",
                                           device="gpu3"))[0][2] == 100.75


def test_a_removed_store_is_no_store_on_every_thread(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    make(db, nodes=4, gpus=8)
    reader = SqliteStore(db, read_only=True)
    workers = [Worker(), Worker()]
    assert [w(lambda: gpus_seen(reader)) for w in workers] == [32, 32]
    remove(db)
    time.sleep(0.3)
    for w in workers:
        answer = w(lambda: gpus_seen(reader))
        assert isinstance(answer, StoreError) and "no store at" in str(answer)
    # The deleted file is let go of, not held open by the threads that read it.
    held = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.islink(f"/proc/self/fd/{fd}")]
    assert not [h for h in held if h.startswith(str(db))]
    make(db, nodes=1, gpus=2)  # and a new store is picked up again
    assert in_thread(lambda: gpus_seen(reader)) == 2
    assert [w(lambda: gpus_seen(reader)) for w in workers] == [2, 2]


def test_the_path_is_looked_at_at_most_once_a_second_per_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_file, "_FILE_CHECK_S", 1.0)
    db = tmp_path / "s.db"
    make(db, nodes=1, gpus=2)
    reader = SqliteStore(db, read_only=True)
    calls = [0]
    real = os.stat

    def counting(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path) == str(db):
            calls[0] += 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(sqlite_file.os, "stat", counting)
    for _ in range(50):
        gpus_seen(reader)
    assert calls[0] <= 2
