"""Dead letters: every message the processor cannot use, kept with the reason why.

A message becomes a dead letter when it does not decode (``FrameError``) or
when the store refuses its frame for good (``StoreRejected``). Each goes to
the dead-letter topic as it came (value and key), with headers that say
where it came from and why: ``reason``, ``source_topic``,
``source_partition``, ``source_offset``, ``original_size``, and
``truncated`` when its value was cut to fit (a message can be larger than
the dead-letter topic takes: the frames topic of a broker may accept 5 MB,
kafka-python's producer sends at most 1 MiB by default). A tombstone (null
value) is sent with an empty value and a ``tombstone`` header.

Sending never stops the processor. A dead letter that the broker refuses
(too large even cut, say) is sent again as headers only. A flush that
fails is retried with backoff for ``give_up_s`` (or until the processor
stops); after that the dead letters of the batch are logged, one ERROR line
each with their position, counted in ``lost``, and the processor moves on: a
dead-letter topic that is gone for good (deleted, no rights) must not wedge
the frames behind it. The same happens to dead letters in hand when the
whole broker is away for longer than ``give_up_s``: they are in the log,
not on the topic.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from fleetwatch.pipeline.bus import BusError, Message, Producer
from fleetwatch.retry import Backoff, retry

log = logging.getLogger(__name__)

# Half of kafka-python's default max_request_size (1 MiB) and of Kafka's default
# message.max.bytes: room for the key and headers, and under every default.
MAX_DEAD_LETTER_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class DeadLetter:
    value: bytes
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    where: str  # topic/partition@offset, for the log


def dead_letter(m: Message, reason: str, max_bytes: int = MAX_DEAD_LETTER_BYTES) -> DeadLetter:
    """The dead letter of ``m``: its value (cut to ``max_bytes``) and key, with headers."""
    value = m.value if m.value is not None else b""
    size = len(value)
    headers = [("reason", reason.encode()[:4096]), ("source_topic", m.topic.encode()),
               ("source_partition", str(m.partition).encode()),
               ("source_offset", str(m.offset).encode()),
               ("original_size", str(size).encode())]
    if m.value is None:
        headers.append(("tombstone", b"1"))
    if size > max_bytes:
        value = bytes(value[:max_bytes])
        headers.append(("truncated", b"1"))
    key = m.key if m.key is None or len(m.key) <= 4096 else m.key[:4096]
    return DeadLetter(value, key, tuple(headers), f"{m.topic}/{m.partition}@{m.offset}")


class DeadLetters:
    """Dead letters of the batch in hand, sent together before the batch is committed."""

    def __init__(self, producer: Producer | None, topic: str, give_up_s: float = 60.0,
                 max_bytes: int = MAX_DEAD_LETTER_BYTES) -> None:
        self._producer = producer
        self._topic = topic
        self._give_up_s = give_up_s
        self._max_bytes = max_bytes
        self._queued: list[DeadLetter] = []
        self.lost = 0

    def add(self, m: Message, reason: str) -> None:
        if self._producer is not None:
            self._queued.append(dead_letter(m, reason, self._max_bytes))

    def send(self, stop: threading.Event | None = None) -> None:
        """Send what was added and wait for the broker's acknowledgement; never raises."""
        if not self._queued:
            return
        letters, self._queued = self._queued, []
        assert self._producer is not None

        def wait(delay: float) -> None:
            # Stopping: no more tries (a batch not committed for it is replayed anyway).
            if stop is not None and stop.wait(delay):
                raise BusError("stopping")

        def attempt() -> None:
            for d in letters:
                self._send_one(d)
            self._producer.flush()  # type: ignore[union-attr]

        def note(exc: BaseException, n: int, delay: float) -> None:
            log.warning("dead letters not acknowledged (%s); try %d again in %.1fs", exc, n + 1,
                        delay)

        try:
            retry(attempt, retryable=(BusError,), attempts=1_000, deadline_s=self._give_up_s,
                  backoff=Backoff(0.5, 10.0), on_retry=note, sleep=wait)
        except BusError as exc:
            self.lost += len(letters)
            for d in letters:
                log.error("dead letter of %s not delivered to %s (%s); reason: %s", d.where,
                          self._topic, exc, dict(d.headers)["reason"].decode(errors="replace"))

    def _send_one(self, d: DeadLetter) -> None:
        assert self._producer is not None
        try:
            self._producer.send(self._topic, d.value, d.key, headers=d.headers)
        except ValueError as exc:  # too large for the producer or the topic even cut
            log.warning("dead letter of %s too large to send (%s); sending its headers only",
                        d.where, exc)
            self._producer.send(self._topic, b"", d.key,
                                headers=(*d.headers, ("truncated", b"1")))
