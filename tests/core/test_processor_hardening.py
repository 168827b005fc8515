"""The processor loop keeps going whatever its store does, and loses nothing it accepted.

Over the in-process bus and a real SQLite store with one failure injected at
a time: a bug in the store's write (an unexpected exception on some frames),
an alert write that fails while the alert book would change, and an SQLite
``OperationalError`` (database locked) in ``write_alerts`` and ``maintain``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.store.helpers import stored

TOPIC, DEAD = "frames", "frames.dead"
T0 = time.time() - 3600


def frame(node: str, ts: float, temp: float = 50.0) -> Frame:
    return Frame("c1", "r1", node, ts, (GpuReading(0, f"GPU-{node}", "H100",
                                                   {"gpu_temp_c": temp}),))


def send(bus: MemoryBus, frames: list[Frame]) -> None:
    p = bus.producer()
    for f in frames:
        p.send(TOPIC, encode(f), f.node.encode())


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class Running:
    """A processor in its own thread over the in-process bus, stopped at the end."""

    def __init__(self, bus: MemoryBus, processor: Processor, batch: int = 10,
                 maintain_every_s: float = 3600.0) -> None:
        self.stop = threading.Event()
        self.consumer = bus.consumer(TOPIC, "g")
        self.thread = threading.Thread(target=processor.run, args=(
            self.consumer, self.stop, batch, maintain_every_s), daemon=True)

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def test_a_store_bug_on_some_frames_dead_letters_them_after_three_tries(tmp_path: Path) -> None:
    """An exception that is neither StoreError nor StoreRejected: the batch is tried
    again (it may be passing), then bisected, and only the frames the store cannot
    take become dead letters, with the error as their reason."""

    class BuggyStore(SqliteStore):
        calls = 0

        def write(self, frames):  # type: ignore[override]
            BuggyStore.calls += 1
            if any(f.node == "odd" for f in frames):
                raise KeyError("gpu_temp_c")  # a store client's bug on an odd frame
            return super().write(frames)

    bus = MemoryBus()
    good = [frame(f"n{i % 3}", T0 + i) for i in range(40)]
    send(bus, good[:20] + [frame("odd", T0)] + good[20:])
    db = tmp_path / "s.db"
    processor = Processor(BuggyStore(db), dead_letters=bus.producer(), dead_letter_topic=DEAD)
    with Running(bus, processor, batch=50) as run:
        wait_for(lambda: stored(db) == 40 and bus.messages(DEAD), 60)
        wait_for(lambda: run.consumer.lag() == 0 and bus._committed[(TOPIC, "g")] == 41)
        assert run.thread.is_alive()
    (dead,) = bus.messages(DEAD)
    reason = dict(dead.headers)["reason"].decode()
    assert dead.key == b"odd" and "KeyError" in reason and "3 times" in reason
    assert processor.stats.errors >= 1


def test_a_failed_alert_write_loses_no_transition(tmp_path: Path) -> None:
    """The alert resolves in the store once alert writes work again (it used to stay
    firing for ever: the book had moved on before the write failed); the book, and
    the sinks, have it resolved meanwhile."""

    class Store(SqliteStore):
        down = threading.Event()
        refused = 0

        def write_alerts(self, alerts):  # type: ignore[override]
            if self.down.is_set():
                Store.refused += 1
                raise StoreError("503 Service Unavailable (test)")
            super().write_alerts(alerts)

    bus = MemoryBus()
    db = tmp_path / "s.db"
    store = Store(db)
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)])
    with Running(bus, processor) as run:
        send(bus, [frame("n1", T0, 95.0)])
        wait_for(lambda: [a.state for a in store.alerts()] == ["firing"])
        Store.down.set()
        send(bus, [frame("n1", T0 + 10, 50.0)])  # cool: resolves the alert
        wait_for(lambda: Store.refused >= 2)
        # Alerts do not wait for the store: resolved (and sent) meanwhile, stored later.
        assert processor.alerts.open == []
        assert [a.state for a in store.alerts()] == ["firing"]
        assert bus._committed[(TOPIC, "g")] == 1  # the cooling frame is not committed
        Store.down.clear()
        wait_for(lambda: store.alerts() == [] and processor.alerts.open == [])
        wait_for(lambda: bus._committed[(TOPIC, "g")] == 2)
        assert run.thread.is_alive()
    (resolved,) = store.alerts(states=("resolved",))
    assert resolved.resolved_ts == T0 + 10


def test_sqlite_locked_in_write_alerts_and_maintain_does_not_kill_the_loop(
        tmp_path: Path) -> None:
    class LockedStore(SqliteStore):
        locked = threading.Event()
        maintained = 0

        def write_alerts(self, alerts):  # type: ignore[override]
            if self.locked.is_set():
                raise sqlite3.OperationalError("database is locked")
            super().write_alerts(alerts)

        def maintain(self, now_ms):  # type: ignore[override]
            LockedStore.maintained += 1
            if self.locked.is_set():
                raise sqlite3.OperationalError("database is locked")
            super().maintain(now_ms)

    bus = MemoryBus()
    db = tmp_path / "s.db"
    store = LockedStore(db)
    LockedStore.locked.set()
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)])
    with Running(bus, processor, maintain_every_s=1.0) as run:
        send(bus, [frame("n1", T0 + i, 95.0) for i in range(5)])
        wait_for(lambda: LockedStore.maintained >= 2 and processor.stats.errors >= 2)
        assert run.thread.is_alive()
        LockedStore.locked.clear()
        send(bus, [frame("n1", T0 + 10, 95.0)])
        wait_for(lambda: stored(db) == 6 and [a.state for a in store.alerts()] == ["firing"])
        wait_for(lambda: bus._committed[(TOPIC, "g")] == 6)
        assert run.thread.is_alive()


def test_the_in_process_consumer_tells_its_listener_about_its_partition() -> None:
    calls: list[tuple[str, list[tuple[str, int]]]] = []

    class Listener:
        def assigned(self, partitions):  # type: ignore[no-untyped-def]
            calls.append(("assigned", list(partitions)))

        def revoked(self, partitions):  # type: ignore[no-untyped-def]
            calls.append(("revoked", list(partitions)))

    consumer = MemoryBus().consumer(TOPIC, "g")
    consumer.listen(Listener())
    consumer.poll(10, 0)
    consumer.poll(10, 0)
    consumer.close()
    assert calls == [("assigned", [(TOPIC, 0)]), ("revoked", [(TOPIC, 0)])]


def test_a_dead_letter_topic_that_never_takes_them_does_not_wedge_the_loop(
        tmp_path: Path) -> None:
    """Dead letters that cannot be delivered for good are logged and counted as lost;
    the frames behind them are stored and committed."""
    from fleetwatch.pipeline.bus import BusError

    class Refusing:
        sends = 0

        def send(self, topic, value, key=None, headers=()):  # type: ignore[no-untyped-def]
            Refusing.sends += 1
            if Refusing.sends % 2:
                raise ValueError("message too large for the topic (test)")

        def flush(self, timeout_s=None):  # type: ignore[no-untyped-def]
            raise BusError("TopicAuthorizationFailed (test)")

        def close(self) -> None: ...

    bus = MemoryBus()
    send(bus, [frame("n1", T0 + i) for i in range(5)])
    bus.producer().send(TOPIC, b"not a frame", b"n9")
    send(bus, [frame("n1", T0 + 10 + i) for i in range(5)])
    db = tmp_path / "s.db"
    processor = Processor(SqliteStore(db), dead_letters=Refusing(), dead_letter_topic=DEAD,
                          dead_letter_give_up_s=1.0)
    with Running(bus, processor, batch=4) as run:
        wait_for(lambda: stored(db) == 10 and bus._committed[(TOPIC, "g")] == 11)
        assert run.thread.is_alive()
    assert processor.stats.dead_letters == 1 and processor.stats.dead_letters_lost == 1
    assert Refusing.sends >= 4  # tried again (headers only after the size refusal)
