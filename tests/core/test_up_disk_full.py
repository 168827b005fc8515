"""`fleetwatch up` stopped while its disk is full: the frames it could not store are lost
(its bus lives in the process) and it says so, with what to do: free space, then
`up --keep`. Never "they will be replayed"."""

from __future__ import annotations

import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.up import unstored_advice
from tests.core.test_up import start_up, stop, wait_for_line
from tests.servers import free_port


def test_the_advice_names_the_full_disk_and_keep(tmp_path: Path) -> None:
    store = str(tmp_path / "sim.db")
    full = StoreError("sqlite write failed")
    full.__cause__ = sqlite3.OperationalError("database or disk is full")
    said = unstored_advice(store, full)
    assert f"the disk holding {store} is full" in said and "MiB free" in said
    assert f"fleetwatch up --keep --store {store}" in said and "lost" in said
    assert "replayed" not in unstored_advice(store, None)


def test_stopping_over_the_in_process_bus_says_the_frames_were_not_stored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Full(SqliteStore):
        def write(self, frames):  # type: ignore[override]
            raise StoreError("sqlite write failed: database or disk is full")

    bus = MemoryBus()
    bus.producer().send("frames", encode(Frame("c", "r", "n", time.time() - 5, (
        GpuReading(0, "GPU-0", "H100", {"gpu_temp_c": 50.0}),))), b"n")
    processor = Processor(Full(tmp_path / "s.db"))
    stop_now = threading.Event()
    worker = threading.Thread(target=processor.run, kwargs=dict(
        consumer=bus.consumer("frames", "g"), stop=stop_now, drain_s=0.5))
    worker.start()
    time.sleep(1.0)
    stop_now.set()
    worker.join(30)
    assert processor.drained == (0, 1)
    assert "were NOT stored, and nothing replays them" in caplog.text
    assert "will be replayed" not in caplog.text


def test_up_stopped_on_a_full_disk_says_what_to_do(tmp_path: Path) -> None:
    where = tmp_path / "small"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        proc = start_up(tmp_path, "--store", str(where / "sim.db"), "--port",
                        str(free_port()), "--speed", "200", "--backfill", "1h")
        wait_for_line(proc, "disk is full", 120)
        code, out = stop(proc)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
    assert code == 1
    assert "frames NOT stored" in out and "will be replayed" not in out
    assert f"the disk holding {where / 'sim.db'} is full" in out
    assert "fleetwatch up --keep" in out and "Traceback" not in out
