"""The processor loop over the in-process bus: backpressure, dead letters, no loss."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline import consume_pause
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore

TOPIC, DEAD = "frames", "frames.dead"


class FlakyStore(SqliteStore):
    """A store that refuses writes while ``down`` is set, as a server away would."""

    down = threading.Event()
    refused = 0

    def write(self, frames):  # type: ignore[override]
        if self.down.is_set():
            FlakyStore.refused += 1
            raise StoreError("connection refused (test)")
        return super().write(frames)


def produce(bus: MemoryBus, steps: int) -> int:
    # Within retention, and never ahead of the processor's clock (300 steps of 15 s).
    sim = FleetSim(SimParams(nodes=2, gpus=2), time.time() - 2 * 3600)
    producer = bus.producer()
    n = 0
    for _ in range(steps):
        sim.step()
        for f in sim.frames():
            producer.send(TOPIC, encode(f), f.node.encode())
            n += 1
    return n


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("writes", [1, 2])
def test_store_outage_pauses_consumption_and_loses_nothing(tmp_path: Path, writes: int,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """``writes``: how many store writes may be in flight (SQLite: 1; line-protocol
    servers: 2, here played by SQLite, whose writes are safe in two threads)."""
    monkeypatch.setattr(consume_pause, "JUDGE_AHEAD_MESSAGES", 150)

    class Store(FlakyStore):
        concurrent_writes = writes

    bus = MemoryBus()
    store = Store(tmp_path / "s.db")
    consumer = bus.consumer(TOPIC, "g")
    processor = Processor(store)
    FlakyStore.refused = 0
    FlakyStore.down.set()
    sent = produce(bus, 300)
    stop = threading.Event()
    worker = threading.Thread(target=processor.run, args=(consumer, stop, 50, 3600.0))
    worker.start()
    try:
        # Two writers may both be refused before the loop hears of the first and pauses:
        # the pause is waited for, not read at once.
        wait_for(lambda: FlakyStore.refused >= 2 and processor.stats.paused)
        # While the store is away, batches are polled (and judged) until the bound of
        # JUDGE_AHEAD_MESSAGES is reached, then nothing more is fetched or committed.
        wait_for(lambda: consumer.lag() <= sent - 150)
        lag = consumer.lag()
        assert sent - 150 - 49 <= lag < sent and (sent - lag) % 50 == 0
        time.sleep(0.5)
        assert consumer.lag() == lag
        assert bus._committed[(TOPIC, "g")] == 0
        FlakyStore.down.clear()
        wait_for(lambda: consumer.lag() == 0 and processor.stats.frames == sent)
    finally:
        stop.set()
        worker.join(10)
    assert not processor.stats.paused
    n = sum(1 for _ in SqliteStore(tmp_path / "s.db", read_only=True).export())
    assert n == sent * (2 * 36 + 5)  # every metric of every frame, once
    assert bus._committed[(TOPIC, "g")] == sent


def test_bad_frames_go_to_the_dead_letter_topic_with_their_reason(tmp_path: Path) -> None:
    bus = MemoryBus()
    producer = bus.producer()
    good = produce(bus, 3)
    producer.send(TOPIC, b"\x93\x01\x02\x03", b"n9")  # [1, 2, 3]: v1, but not a frame
    producer.send(TOPIC, b"", b"n9")
    processor = Processor(SqliteStore(tmp_path / "s.db"), dead_letters=producer,
                          dead_letter_topic=DEAD)
    consumer = bus.consumer(TOPIC, "g")
    processor.handle(consumer.poll(100, 0))
    dead = bus.messages(DEAD)
    assert [m.value for m in dead] == [b"\x93\x01\x02\x03", b""]
    reasons = [dict(m.headers)["reason"].decode() for m in dead]
    assert "8 fields" in reasons[0] and "empty message" in reasons[1]
    assert dict(dead[0].headers)["source_offset"] == str(good).encode()
    assert processor.stats.frames == good and processor.stats.dead_letters == 2


def test_garbage_is_collected_on_a_timer_while_a_processor_runs(tmp_path: Path) -> None:
    import gc

    bus = MemoryBus()
    processor = Processor(SqliteStore(tmp_path / "s.db"))
    sent = produce(bus, 20)
    stop = threading.Event()
    assert gc.isenabled()
    full = gc.get_stats()[2]["collections"]
    worker = threading.Thread(target=processor.run,
                              args=(bus.consumer(TOPIC, "g"), stop, 50, 3600.0, 0.05))
    worker.start()
    try:
        wait_for(lambda: processor.stats.frames == sent)
        assert not gc.isenabled()  # no collections on allocation counts...
        wait_for(lambda: gc.get_stats()[2]["collections"] >= full + 3)  # ...but on the timer
    finally:
        stop.set()
        worker.join(10)
    assert gc.isenabled()  # as it was before the processor ran


def test_overlapping_writes_are_evaluated_and_committed_in_order(tmp_path: Path) -> None:
    """With a store that takes two writes at once, a later batch stored first waits
    for the earlier one: nothing is committed past a batch that is not stored."""

    class SlowFirstWrite(SqliteStore):
        concurrent_writes = 2
        release = threading.Event()
        calls: list[float] = []

        def write(self, frames):  # type: ignore[override]
            first = frames[0].ts == min(self.calls + [frames[0].ts])
            self.calls.append(frames[0].ts)
            n = super().write(frames)
            if first and not self.release.is_set():
                assert self.release.wait(30)
            return n

    bus = MemoryBus()
    store = SlowFirstWrite(tmp_path / "s.db")
    processor = Processor(store)
    sent = produce(bus, 100)  # 200 frames: 4 batches of 50
    stop = threading.Event()
    worker = threading.Thread(target=processor.run,
                              args=(bus.consumer(TOPIC, "g"), stop, 50, 3600.0))
    worker.start()
    try:
        wait_for(lambda: len(store.calls) >= 2)  # the second batch went out meanwhile
        time.sleep(0.3)
        assert processor.stats.frames == 0 and bus._committed.get((TOPIC, "g"), 0) == 0
        store.release.set()
        wait_for(lambda: bus._committed.get((TOPIC, "g")) == sent)
    finally:
        stop.set()
        worker.join(10)
    assert processor.stats.frames == sent
    assert store.calls == sorted(store.calls)  # submitted oldest first
    n = sum(1 for _ in SqliteStore(tmp_path / "s.db", read_only=True).export())
    assert n == sent * (2 * 36 + 5)
