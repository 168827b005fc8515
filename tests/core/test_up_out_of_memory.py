"""`fleetwatch up` whose processor runs out of memory stops as a whole, as `fleetwatch
process` does: a line naming memory, a non-zero exit (a supervisor restarts it), the store
closed and its lock released, instead of an agent and a dashboard that go on over a
processor thread that has died."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from fleetwatch.config import Config
from fleetwatch.pipeline.out_of_memory import OutOfMemory, out_of_memory_said
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.service import Stop
from fleetwatch.storelock import StoreLock
from fleetwatch.up import EXIT_OUT_OF_MEMORY, UpOptions, build
from tests.core.test_up import FLEET
from tests.servers import free_port


def test_over_a_bus_in_the_process_the_frames_in_hand_are_said_lost() -> None:
    said = out_of_memory_said(MemoryError(), 3, replays=False)
    assert "out of memory" in said and "memory limit" in said
    assert "nothing replays them" in said and "are replayed" not in said
    assert "are replayed" in out_of_memory_said(MemoryError(), 3)


def test_a_processor_out_of_memory_halts_the_system(tmp_path: Path, monkeypatch) -> None:
    def starved(self, frames):  # type: ignore[no-untyped-def]
        raise MemoryError()

    monkeypatch.setattr(SqliteStore, "write", starved)
    system, _ = build(Config(), UpOptions(simulate=True, interval_s=1.0, speed=100.0,
                                          backfill_s=60.0, store=str(tmp_path / "s.db")))
    system.halt = Stop()
    system.start()
    try:
        assert system.halt.wait(60), "the processor's memory errors did not halt up"
    finally:
        t0 = time.monotonic()
        left = system.stop()
        # A dead processor stores nothing more: stop() does not wait out its drain.
        assert time.monotonic() - t0 < 15
    assert system.halt.cause == "out of memory"
    assert isinstance(system.failure, OutOfMemory)
    assert "nothing replays them" in str(system.failure)
    assert left > 0 and system.processor.stats.frames == 0
    assert not any(t.is_alive() for t in threading.enumerate() if t.name == "processor")
    StoreLock(tmp_path / "s.db").acquire().release()  # released by stop()


# `up` in its own process, its store's writes failing for lack of memory once a few
# batches are stored.
_STARVED_UP = textwrap.dedent("""
    import sys
    from fleetwatch.pipeline.store.sqlite import SqliteStore
    from fleetwatch.cli import main

    write, calls = SqliteStore.write, [0]

    def starved(self, frames):
        calls[0] += 1
        if calls[0] > 3:
            raise MemoryError()
        return write(self, frames)

    SqliteStore.write = starved
    sys.exit(main(sys.argv[1:]))
""")


def test_up_out_of_memory_exits_non_zero_with_its_store_intact(tmp_path: Path) -> None:
    store = tmp_path / "sim.db"
    proc = subprocess.run(
        [sys.executable, "-c", _STARVED_UP, "up", "--simulate", *FLEET, "--store", str(store),
         "--port", str(free_port()), "--interval", "1s", "--backfill", "1m", "--speed", "100"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == EXIT_OUT_OF_MEMORY != 0, out
    assert "stopped (out of memory)" in out
    assert "out of memory (MemoryError: ) 3 times in a row" in out and "memory limit" in out
    assert "nothing replays them" in out and "fleetwatch up --keep" in out
    assert "Traceback" not in out
    assert f"store closed ({store})" in out
    with sqlite3.connect(store) as db:  # what was stored before stays whole
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    stored = SqliteStore(store, read_only=True)
    try:
        assert any(True for _ in stored.export())
    finally:
        stored.close()
    StoreLock(store).acquire().release()  # the lock was released
