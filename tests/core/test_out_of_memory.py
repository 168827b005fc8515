"""A processor out of memory ("can't start new thread" under ``ulimit -v``, MemoryError)
says "memory" and, after a few such errors in a row, stops with ``OutOfMemory`` (the
service exits non-zero so that its supervisor restarts it) instead of logging an
"unexpected error" for ever."""

from __future__ import annotations

import errno
import logging
import threading
import time
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.out_of_memory import MEMORY_ERRORS_MAX, OutOfMemory, out_of_memory
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore


def test_memory_errors_are_told_from_others() -> None:
    assert out_of_memory(RuntimeError("can't start new thread"))
    assert out_of_memory(MemoryError())
    assert out_of_memory(OSError(errno.ENOMEM, "Cannot allocate memory"))
    assert not out_of_memory(RuntimeError("dictionary changed size during iteration"))
    assert not out_of_memory(OSError(errno.EIO, "I/O error"))


def test_the_loop_stops_after_memory_errors_in_a_row(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Starved(SqliteStore):
        calls = 0

        def write(self, frames):  # type: ignore[override]
            Starved.calls += 1
            raise RuntimeError("can't start new thread")

    bus = MemoryBus()
    bus.producer().send("frames", encode(Frame("c", "r", "n", time.time() - 5, (
        GpuReading(0, "GPU-0", "H100", {"gpu_temp_c": 50.0}),))), b"n")
    processor = Processor(Starved(tmp_path / "s.db"))
    raised: list[BaseException] = []

    def run() -> None:
        try:
            processor.run(bus.consumer("frames", "g"), threading.Event(), 10, 3600.0)
        except BaseException as exc:  # noqa: BLE001 - what the test looks at
            raised.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    assert not worker.is_alive()
    (exc,) = raised
    assert isinstance(exc, OutOfMemory) and "memory limit" in str(exc)
    assert Starved.calls == MEMORY_ERRORS_MAX
    assert "unexpected error" not in caplog.text
    said = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert all("out of memory" in r.getMessage() and r.exc_info is None for r in said)
    assert bus._committed[("frames", "g")] == 0  # replayed by whoever runs next
