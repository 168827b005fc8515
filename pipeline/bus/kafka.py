"""The production bus: Kafka (or a Kafka-protocol broker such as Tansu) through kafka-python.

``KafkaProducer`` never blocks without bound and never hides a failure:
``send`` raises ``BusError`` when the broker cannot take a message (no
metadata within ``max_block_ms``, too much unacknowledged data) and ``flush``
raises it when anything sent since the last good flush was not acknowledged.
After a ``BusError`` the producer drops its kafka-python client and starts a
fresh one on the next call: that discards batches the caller now owns again
(the spool re-sends them; an old client retrying them later would duplicate
and reorder), and a fresh client is what recovers after a broker restart
(an idempotent kafka-python producer fails every send after one; see
INFRA.md). Idempotence is off for the same reason; one request in flight per
connection keeps retries in order instead.

An acknowledgement alone does not make a message delivered: a client that outlived a
broker restart still writes to the partitions of the topic as it was, and Tansu
acknowledges writes to a topic or partition it no longer has and keeps nothing. ``flush``
checks each client's acknowledgements (``kafka_acks.AckLedger``) and raises ``BusError``
where they show such a write, so that they are sent again through a fresh client.

``KafkaConsumer`` (``kafka_consumer``) and ``ensure_topic`` (``topics``) are imported
from here too: this module is the Kafka bus's one entry point.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kafka
import kafka.errors as kerr

from fleetwatch.pipeline.bus import BusError
from fleetwatch.pipeline.bus.kafka_access import cannot_reach, check_listener, refused_options
from fleetwatch.pipeline.bus.kafka_acks import AckLedger
from fleetwatch.pipeline.bus.kafka_consumer import KafkaConsumer
from fleetwatch.pipeline.bus.topics import ensure_topic, topic_spec

__all__ = ["KafkaConsumer", "KafkaProducer", "ensure_topic", "topic_spec"]

log = logging.getLogger(__name__)


class KafkaProducer:
    def __init__(self, bootstrap: str, *, client_id: str = "fleetwatch",
                 security: dict[str, Any] | None = None, compression: str | None = "lz4",
                 acks: str | int = "all", linger_ms: int = 5, max_block_ms: int = 5000,
                 request_timeout_ms: int = 10_000, delivery_timeout_ms: int = 30_000,
                 max_pending: int = 100_000, max_pending_bytes: int = 64 << 20,
                 auto_create_topics: bool = True, prepare: Callable[[], object] | None = None,
                 options: Mapping[str, Any] | None = None, **extra: Any) -> None:
        """``prepare``: called before each new client is made (at the first send, and after
        every failure that abandoned the client): the agent ensures its topics there, so
        that a topic a fresh (or emptied) broker lacks is created with ``bus.partitions``
        rather than by the broker's auto-creation. While it returns false (the topics could
        not be checked) no client is made and the send raises ``BusError`` (the agent
        spools, and checks again at its next try): a client's first send would let the
        broker auto-create a missing topic, which Tansu does even with
        ``auto_create_topics`` False. That flag still keeps Kafka (2.3 and later) from
        auto-creating a topic removed while a client is alive.

        ``options``: the user's kafka-python options (``bus.kafka_producer``, checked at
        load), over the values above; ``bootstrap_timeout_ms`` follows ``max_block_ms``."""
        self._bootstrap = bootstrap
        self._prepare = prepare
        self._config: dict[str, Any] = dict(
            bootstrap_servers=bootstrap, client_id=client_id, compression_type=compression,
            acks=acks, linger_ms=linger_ms, max_block_ms=max_block_ms,
            bootstrap_timeout_ms=max_block_ms, request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=delivery_timeout_ms, enable_idempotence=False,
            max_in_flight_requests_per_connection=1,
            allow_auto_create_topics=auto_create_topics, **(security or {}), **extra)
        chosen = dict(options or {})
        if "max_block_ms" in chosen:
            chosen.setdefault("bootstrap_timeout_ms", chosen["max_block_ms"])
        self._config.update(chosen)
        self._delivery_timeout_s = self._config["delivery_timeout_ms"] / 1000
        self._max_pending = max_pending
        self._max_pending_bytes = max_pending_bytes
        self._client: kafka.KafkaProducer | None = None
        self._lock = threading.Lock()
        # Callbacks of a discarded client carry an old generation and are ignored.
        self._generation = 0
        self._pending = 0
        self._pending_bytes = 0
        self._failed = 0
        self._last_error: BaseException | None = None
        self._acks = AckLedger()  # of the current client
        self._closed = False

    def _producer(self) -> kafka.KafkaProducer:
        if self._closed:
            raise BusError("producer is closed")
        if self._client is None:
            # No client while the topics could not be checked: its first send would let
            # the broker create a missing topic with its default partition count (Tansu,
            # and brokers before Kafka 2.3, do so whatever allow_auto_create_topics says).
            if self._prepare is not None and not self._prepare():
                raise BusError(f"the topics could not be checked at {self._bootstrap}; "
                               "nothing is sent until they are")
            check_listener(self._bootstrap, self._config)
            since = time.monotonic()
            try:
                self._client = kafka.KafkaProducer(**self._config)
            except (kerr.KafkaConfigurationError, ValueError) as exc:
                raise BusError(refused_options("producer", exc)) from exc
            except kerr.KafkaError as exc:
                raise BusError(cannot_reach(self._bootstrap, exc, since)) from exc
            # Later clients skip the version probe, so one can be made while the
            # broker is away and simply wait for it within max_block_ms.
            self._config["api_version"] = self._client.config["api_version"]
        return self._client

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = ()) -> None:
        size = (len(value or b"") + (len(key) if key else 0)
                + sum(len(k) + len(v) for k, v in headers))
        with self._lock:
            full = (self._pending >= self._max_pending
                    or self._pending_bytes + size > self._max_pending_bytes)
            gen, lost = self._generation, self._acks.lost
        if full:
            self._reset()
            raise BusError(f"producer buffer full ({self._max_pending} messages or "
                           f"{self._max_pending_bytes} bytes unacknowledged)")
        if lost is not None:  # this client writes to a topic the broker no longer has
            self._reset()
            raise BusError(f"messages acknowledged by {self._bootstrap} but lost: {lost}")
        client = self._producer()
        try:
            future = client.send(topic, value=value, key=key, headers=list(headers))
        except kerr.MessageSizeTooLargeError as exc:
            raise ValueError(f"message of {size} bytes is too large for {topic!r}: {exc}") from exc
        except (kerr.KafkaError, OSError) as exc:
            self._reset()
            raise BusError(f"cannot send to {topic!r} at {self._bootstrap}: {exc}") from exc
        with self._lock:
            self._pending += 1
            self._pending_bytes += size
        future.add_callback(self._done, gen, size)
        future.add_errback(self._error, gen, size)
        if future.is_done and future.failed():
            self._reset()
            raise BusError(f"cannot send to {topic!r}: {future.exception}")

    def _done(self, gen: int, size: int, metadata: Any) -> None:
        with self._lock:
            if gen == self._generation:
                self._pending -= 1
                self._pending_bytes -= size
                self._acks.acked(metadata.topic, metadata.partition, metadata.offset)

    def _error(self, gen: int, size: int, exc: BaseException) -> None:
        with self._lock:
            if gen == self._generation:
                self._pending -= 1
                self._pending_bytes -= size
                self._failed += 1
                self._last_error = exc

    def flush(self, timeout_s: float | None = None) -> None:
        client = self._client
        if client is None:
            return
        timeout = self._delivery_timeout_s if timeout_s is None else timeout_s
        try:
            client.flush(timeout=timeout)
        except (kerr.KafkaError, OSError) as exc:
            self._reset()
            raise BusError(f"messages not acknowledged by {self._bootstrap} within "
                           f"{timeout:g}s: {exc}") from exc
        with self._lock:
            failed, pending, error = self._failed, self._pending, self._last_error
        if failed or pending:
            self._reset()
            raise BusError(f"{failed + pending} messages not acknowledged by "
                           f"{self._bootstrap}: {error}")
        self._check_acks(client)

    def _check_acks(self, client: kafka.KafkaProducer) -> None:
        """Raise ``BusError`` (and drop the client) if messages acknowledged since the last
        good flush went to a partition the topic no longer has (``AckLedger``)."""
        def partitions_of(topic: str) -> set[int] | None:
            # The client's metadata as it is, asking the broker nothing: a metadata request
            # for a topic it lacks makes Tansu create it with its own count, before the
            # agent's topic check makes it with bus.partitions.
            cached = getattr(client, "_metadata", None)
            if cached is not None:
                return cached.partitions_for_topic(topic)  # type: ignore[no-any-return]
            try:  # another kafka-python: ask (an unknown topic waits max_block_ms)
                return client.partitions_for(topic)  # type: ignore[no-any-return]
            except kerr.KafkaError:
                return None

        with self._lock:
            acks = self._acks
        lost = acks.check(partitions_of)
        if lost is not None:
            self._reset()
            raise BusError(f"messages acknowledged by {self._bootstrap} but lost: {lost}; "
                           "they are sent again")

    @property
    def pending(self) -> int:
        """Messages sent but not yet acknowledged."""
        return self._pending

    def _reset(self) -> None:
        """Abandon the client and everything it still holds; the next call starts afresh."""
        with self._lock:
            self._generation += 1
            self._pending = self._pending_bytes = self._failed = 0
            self._last_error = None
            self._acks = AckLedger()
            client, self._client = self._client, None
        if client is not None:
            _force_close(client)

    def close(self) -> None:
        client, self._client = self._client, None
        self._closed = True
        if client is not None:
            try:
                client.close(timeout=5)
            except kerr.KafkaError:
                _force_close(client)


def _force_close(client: kafka.KafkaProducer) -> None:
    # kafka-python's close(timeout=0) flushes first and raises when batches
    # are pending, before it would abort them; abort them ourselves.
    try:
        client.close(timeout=0)
        return
    except kerr.KafkaError:
        pass
    sender = getattr(client, "_sender", None)
    if sender is not None:
        sender.force_close()
        sender.join(5)
    try:
        client.close(timeout=0)
    except kerr.KafkaError:
        log.debug("kafka producer did not close cleanly", exc_info=True)
