"""The in-process bus: topics are lists, one partition, committed offsets per group.

Thread-safe, so the agent loop and the processor of ``fleetwatch up`` can run
in different threads. Bounded: a producer that gets ahead of the consumer by
more than ``max_backlog`` messages blocks, which is the backpressure the
Kafka path gets from the broker's retention instead.

Bounded in memory too, as ``up`` runs for weeks: once every group of a topic
has committed a message, it is dropped (Kafka would keep it to its retention;
nothing here reads behind its group's commit). Offsets stay those of the
whole topic: each topic keeps the offset of its first message still held. A
topic no group reads yet (the dead letters of ``up``, a group not yet joined)
keeps everything, and a group that joins after messages were dropped starts
at the first one held, as a Kafka consumer with ``earliest`` does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from fleetwatch.pipeline.bus import BusError, Message, Partition, Rebalance


class MemoryBus:
    def __init__(self, max_backlog: int = 100_000) -> None:
        self._topics: dict[str, list[Message]] = {}
        self._base: dict[str, int] = {}  # topic -> offset of its first message held
        self._committed: dict[tuple[str, str], int] = {}
        self._cond = threading.Condition()
        self._max_backlog = max_backlog

    def producer(self) -> MemoryProducer:
        return MemoryProducer(self)

    def consumer(self, topic: str, group: str) -> MemoryConsumer:
        return MemoryConsumer(self, topic, group)

    def messages(self, topic: str) -> list[Message]:
        """The messages of ``topic`` still held (those some group has not committed)."""
        with self._cond:
            return list(self._topics.get(topic, ()))

    def _end(self, topic: str) -> int:
        """The offset the next message of ``topic`` gets."""
        return self._base.get(topic, 0) + len(self._topics.get(topic, ()))

    def _read(self, topic: str, position: int, max_messages: int) -> list[Message]:
        start = position - self._base.get(topic, 0)
        return self._topics.get(topic, [])[start:start + max_messages]

    def _drop_committed(self, topic: str) -> None:
        """Drop the messages of ``topic`` that every group has committed."""
        groups = [off for (t, _), off in self._committed.items() if t == topic]
        base = self._base.get(topic, 0)
        done = min(groups, default=base) - base
        if done > 0:
            del self._topics.setdefault(topic, [])[:done]
            self._base[topic] = base + done

    def _append(self, topic: str, value: bytes, key: bytes | None,
                headers: Sequence[tuple[str, bytes]], timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            log = self._topics.setdefault(topic, [])
            while self._backlog(topic) >= self._max_backlog:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BusError(f"in-process topic {topic!r} is full "
                                   f"({self._max_backlog} unconsumed messages)")
                self._cond.wait(left)
            log.append(Message(value, key, topic, 0, self._end(topic), tuple(headers)))
            self._cond.notify_all()

    def _backlog(self, topic: str) -> int:
        groups = [off for (t, _), off in self._committed.items() if t == topic]
        if not groups:
            return 0  # nobody reads it yet: nothing to wait for
        return self._end(topic) - min(groups)


class MemoryProducer:
    def __init__(self, bus: MemoryBus) -> None:
        self._bus = bus

    def send(self, topic: str, value: bytes, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = ()) -> None:
        self._bus._append(topic, value, key, headers)

    def flush(self, timeout_s: float | None = None) -> None:
        return None

    def close(self) -> None:
        return None


class MemoryConsumer:
    # What it did not commit is gone with the process: nobody replays it.
    replays = False

    def __init__(self, bus: MemoryBus, topic: str, group: str) -> None:
        self._bus = bus
        self._topic = topic
        self._group = group
        self._paused = False
        self._listener: Rebalance | None = None
        self._assigned = False
        with bus._cond:
            # A group new to the topic starts at its first message still held.
            start = bus._committed.setdefault((topic, group), bus._base.get(topic, 0))
            self._position = max(start, bus._base.get(topic, 0))

    def listen(self, listener: Rebalance) -> None:
        self._listener = listener

    def poll(self, max_messages: int = 500, timeout_s: float = 1.0) -> list[Message]:
        # The one partition is this consumer's from its first poll to its close,
        # told to the listener from inside poll, as Kafka's consumer does.
        if not self._assigned:
            self._assigned = True
            if self._listener is not None:
                self._listener.assigned([(self._topic, 0)])
        if self._paused:
            time.sleep(min(timeout_s, 0.05))
            return []
        bus = self._bus
        with bus._cond:
            if self._position >= bus._end(self._topic) and timeout_s > 0:
                bus._cond.wait(timeout_s)
            # Behind what the bus still holds (its group committed past it): go on from there.
            self._position = max(self._position, bus._base.get(self._topic, 0))
            batch = bus._read(self._topic, self._position, max_messages)
            self._position += len(batch)
            return batch

    def commit(self, messages: Sequence[Message] | None = None) -> None:
        position = self._position if not messages else messages[-1].offset + 1
        with self._bus._cond:
            self._bus._committed[(self._topic, self._group)] = position
            self._bus._drop_committed(self._topic)
            self._bus._cond.notify_all()

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def lag(self) -> int | None:
        with self._bus._cond:
            return self._bus._end(self._topic) - self._position

    def partitions(self) -> frozenset[Partition]:
        return frozenset({(self._topic, 0)})

    def partition_of(self, key: bytes) -> Partition | None:
        return (self._topic, 0)

    def close(self) -> None:
        if self._assigned and self._listener is not None:
            self._listener.revoked([(self._topic, 0)])
        self._assigned = False
