"""A store server that is away is said in one line per retry round, naming the server and
the error in words: no urllib3 object address, no line per attempt, and no traceback
when the processor stops during the outage."""

from __future__ import annotations

import logging
import time

import pytest

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store import StoreError
from fleetwatch.pipeline.store.lpwriter import LineProtocolWriter, plain
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import free_port


def test_plain_drops_object_addresses_and_names_a_refused_connection() -> None:
    from urllib3.exceptions import NewConnectionError

    exc = NewConnectionError(object(), "Failed to establish a new connection: [Errno 111] "
                             "Connection refused")
    assert "object at 0x" in str(exc)
    assert plain(exc) == "connection refused: is the server running?"
    other = NewConnectionError(object(), "Failed to establish a new connection: [Errno -2] "
                               "Name or service not known")
    assert plain(other) == ("NewConnectionError: Failed to establish a new connection: "
                            "[Errno -2] Name or service not known")


def test_a_refused_write_says_so_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    writer = LineProtocolWriter(url, max_retries=2, retry_interval_s=0.01)
    try:
        with pytest.raises(StoreError) as away:
            writer.write_lines(["m,host=a v=1 1"])
    finally:
        writer.close()
    assert str(away.value) == (f"cannot write 1 lines to {url} after 3 attempts: connection "
                               "refused: is the server running?")
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []


def test_stopping_while_the_store_is_away_logs_no_traceback(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    class Away(SqliteStore):
        down = False

        def write_alerts(self, alerts):  # type: ignore[override]
            if self.down:
                raise StoreError("cannot write 8 lines to http://127.0.0.1:9 after 4 "
                                 "attempts: connection refused: is the server running?")
            super().write_alerts(alerts)

    store = Away(tmp_path / "s.db")
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)],
                          keep_firing_s=0.0)
    t0 = time.time() - 100
    hot = [Frame("c", "r", "n", t0 + i, (GpuReading(0, "GPU-0", "H100",
                                                    {"gpu_temp_c": 95.0 + i}),))
           for i in range(3)]
    processor.process(hot)
    store.down = True
    caplog.set_level(logging.INFO)
    caplog.clear()
    processor.flush()
    for r in caplog.records:
        assert r.exc_info is None, r.getMessage()


def test_after_a_store_outage_the_log_says_the_store_came_back_not_the_bus(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    """Deploy finding 9 (r22): after a store outage (no bus error at all) the processor
    logged "bus is back; consuming again". Over the in-process bus and a SQLite store whose
    writes fail for a while."""
    import threading

    from fleetwatch.codec import encode
    from fleetwatch.pipeline.bus.memory import MemoryBus

    class Flaky(SqliteStore):
        fails = 2

        def write(self, frames):  # type: ignore[override]
            if self.fails:
                self.fails -= 1
                raise StoreError("cannot write to http://127.0.0.1:9: connection refused")
            return super().write(frames)

    bus = MemoryBus()
    p = bus.producer()
    t0 = time.time() - 600
    for k in range(3):
        p.send("frames", encode(Frame("c1", "r1", "n1", t0 + 5 * k, (GpuReading(
            0, "GPU-1", "H100", {"gpu_temp_c": 50.0}),))), b"n1")
    store = Flaky(tmp_path / "s.db")
    processor = Processor(store, [])
    stop = threading.Event()
    caplog.set_level(logging.DEBUG, "fleetwatch")
    runner = threading.Thread(target=processor.run, args=(bus.consumer("frames", "g"), stop),
                              kwargs={"maintain_every_s": 3600.0, "drain_s": 5.0})
    runner.start()
    deadline = time.monotonic() + 30
    while processor.stats.frames < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    stop.set()
    runner.join(30)
    said = [r.getMessage() for r in caplog.records]
    assert processor.stats.frames == 3, said
    assert any(m.startswith("store unavailable") for m in said), said
    assert any(m.startswith("store is back") for m in said), said
    assert not any("bus is back" in m for m in said), said
