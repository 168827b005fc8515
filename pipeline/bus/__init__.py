"""The bus between agents and processors: a ``Producer`` and a ``Consumer``.

Messages are bytes (encoded frames, dead letters, alerts); the codec lives at
the edges, not in the bus. ``memory`` is the in-process bus of ``fleetwatch
up``; ``kafka`` is the production one. ``open_bus`` in ``fleetwatch.wiring``
picks one from config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# A partition of a topic: (topic, partition number).
Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Message:
    # None: a Kafka tombstone (a record with a null value); never a frame.
    value: bytes | None
    key: bytes | None = None
    topic: str = ""
    partition: int = 0
    offset: int = 0
    headers: tuple[tuple[str, bytes], ...] = ()


class BusError(RuntimeError):
    """The bus cannot take or give messages right now (broker away, timeout)."""


class BusBroken(RuntimeError):
    """The bus client cannot go on: a request it cannot even encode (a value outside the
    Kafka protocol's range) fails its fetch, after which kafka-python fetches nothing and
    says nothing. Waiting would store nothing for ever: the processor stops, naming it."""


class BusRebalancing(BusError):
    """The consumer group is rebalancing (a member joined or left): what was read is
    committed after it. Routine (every rolling upgrade step), not an outage."""


class Producer(Protocol):
    def send(self, topic: str, value: bytes, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = ()) -> None:
        """Queue one message; raise ``BusError`` if it cannot be queued."""

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every queued message is acknowledged; ``BusError`` if not."""

    def close(self) -> None: ...


class Rebalance(Protocol):
    """Told which partitions a consumer gains and loses, so that per-partition
    (per-node) state can follow them. Called from inside ``Consumer.poll``, on
    the polling thread, so the listener needs no lock against its own loop.

    Kafka's rebalance revokes every partition and then assigns the new set,
    both within one ``poll``: a member that keeps a partition is told it lost
    it and got it back; compare the two sets to find what really moved.
    """

    def revoked(self, partitions: Sequence[Partition]) -> None: ...

    def assigned(self, partitions: Sequence[Partition]) -> None: ...


class Consumer(Protocol):
    def listen(self, listener: Rebalance) -> None:
        """Call ``listener`` on every later assignment and revocation (one listener)."""

    def poll(self, max_messages: int = 500, timeout_s: float = 1.0) -> list[Message]:
        """The next messages of the subscribed topic, in order per partition."""

    def commit(self, messages: Sequence[Message] | None = None) -> None:
        """Mark messages as done: these (up to each one's partition offset), else all polled."""

    def pause(self) -> None:
        """Stop fetching (``poll`` returns nothing) but stay in the group."""

    def resume(self) -> None: ...

    def lag(self) -> int | None:
        """Messages in the assigned partitions not yet returned, if known."""

    def partition_of(self, key: bytes) -> Partition | None:
        """The partition of the subscribed topic that a producer's default partitioner
        puts messages keyed ``key`` in (None while the topic's size is not known)."""

    def close(self) -> None: ...
