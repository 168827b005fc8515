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

``DeadLetterLog`` keeps the processor's log readable when a producer sends
thousands of bad messages: the first of each kind is said at once, the next
ones are counted and said at most once an interval a kind, with the count,
the last one's position and reason. Every dead letter still goes to the
topic and is counted in the metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
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


# The most of a dead letter's reason a log line quotes.
_MAX_LOGGED = 600


@dataclass(slots=True)
class _Kind:
    quiet_until: float  # nothing more is said of this kind before then
    since: float  # when the first one counted (not yet said) came
    count: int = 0  # dead letters since the last line, not said one by one
    last: tuple[str, str] = ("", "")  # (where, reason) of the latest


class DeadLetterLog:
    """The processor's log of dead letters: summarised per kind (the dead-letter counter's
    ``field``), so that a burst of 20,000 bad messages writes a few lines, not 20,000.

    ``add`` says a dead letter at once when its kind has said nothing for ``every_s``;
    otherwise it is counted, and ``flush`` says the count (and the latest) once
    ``every_s`` has passed since the kind's last line, or at once when ``final``.
    """

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 say: Callable[[str], None] | None = None, logger: logging.Logger = log,
                 topic: str | None = None) -> None:
        self._every_s = every_s
        # Where each one is kept, with its reason: the dead-letter topic, if there is one.
        self._kept = (f"each goes to {topic} with its reason" if topic is not None else
                      "each counted in fleetwatch_processor_dead_letters_total")
        self._clock = clock
        self._say = say or (lambda text: logger.warning("%s", text))
        self._kinds: dict[str, _Kind] = {}
        self._next_flush = float("inf")

    def add(self, kind: str, where: str, reason: str) -> None:
        if len(reason) > _MAX_LOGGED:  # the header keeps 4 KB of it, the log a line
            reason = f"{reason[:_MAX_LOGGED]}... ({len(reason):,} characters)"
        now = self._clock()
        k = self._kinds.get(kind)
        if k is None or (k.count == 0 and now >= k.quiet_until):
            self._kinds[kind] = _Kind(now + self._every_s, now)
            self._say(f"dead letter from {where}: {reason} (more of field {kind} within "
                      f"{self._every_s:g} s are counted and said together; {self._kept})")
            return
        if k.count == 0:
            k.since = now
        k.count += 1
        k.last = (where, reason)
        self._next_flush = min(self._next_flush, k.quiet_until)

    def flush(self, final: bool = False) -> None:
        """Say the counts of the kinds whose interval is over (all of them when ``final``)."""
        now = self._clock()
        if now < self._next_flush and not final:
            return
        self._next_flush = float("inf")
        for kind, k in self._kinds.items():
            if not k.count:
                continue
            if now < k.quiet_until and not final:
                self._next_flush = min(self._next_flush, k.quiet_until)
                continue
            where, reason = k.last
            self._say(f"dead letters: {k.count:,} more of field {kind} in the last "
                      f"{max(now - k.since, 0.0):.0f} s ({self._kept}); the latest from "
                      f"{where}: {reason}")
            k.count, k.quiet_until = 0, now + self._every_s
