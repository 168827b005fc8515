"""``Sender``: publishing on its own thread, so that sampling never waits for the network.

The sampling loop hands each encoded frame to ``put`` (a deque append, never
blocking); the sender thread sends what is queued, in order, then flushes. Behind
it the ``SpoolingProducer`` spools and replays: a broker that is away costs the
sender thread its waits (``max_block_ms``, flush timeouts), never a sample.

What sits in the queue is in memory only until the sender hands it on (at most
one flush, a few seconds while the broker is away). The queue is bounded
(``max_queued``): past it the oldest frames are dropped and counted, so a sender
stuck for hours cannot take the node's memory.

No frame leaves the queue unaccounted for. When the producer raises:

* ``BusError`` (only a producer without a spool does): that frame is dropped
  and counted;
* ``ValueError``: the producer refuses that frame for what it is (too large, a
  topic Kafka cannot have). Sending it again cannot succeed and holding it would
  hold back every frame behind it, so it is dropped and counted, as the spool's
  replay drops a frame the broker refuses;
* anything else: the sender cannot tell the frame's fault from the producer's.
  That frame and the ones after it go back to the head of the queue, in order,
  and are tried again after a backoff (the producer may already hold some of
  them: at-least-once, as the spool's replay; the store's writes are idempotent).
  The queue's bound still holds, and what ``close`` finds still queued is
  counted as dropped: the queue dies with the process.

``reachable`` is False while frames do not get through either way, for the
agent's broker-up gauge: a producer that reaches its broker but takes no frame
is no broker that is up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from fleetwatch.pipeline.bus import BusError, Producer
from fleetwatch.retry import Backoff

log = logging.getLogger(__name__)

Item = tuple[str, bytes, bytes | None]


class Sender:
    def __init__(self, producer: Producer, on_dropped: Callable[[int], None] | None = None,
                 max_queued: int = 100_000, idle_s: float = 1.0, retry_min_s: float = 0.5,
                 retry_max_s: float = 30.0) -> None:
        self.producer = producer
        self._on_dropped = on_dropped or (lambda n: None)
        self._queue: deque[Item] = deque()
        self._max_queued = max_queued
        self._idle_s = idle_s
        # The condition's lock is reentrant: ``_drop`` takes it, also from inside ``put``.
        self._wake = threading.Condition()
        self._stopping = False
        self._closed = False
        self.dropped = 0
        # Jittered, so that a rack of agents failing alike does not retry in step.
        self._backoff = Backoff(retry_min_s, retry_max_s)
        self._retry_at = 0.0  # while an unexpected failure is retried: when; 0.0: not failing
        self._refused = 0     # frames refused (ValueError) since one last got through
        self._thread = threading.Thread(target=self._run, name="fleetwatch-sender", daemon=True)

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def reachable(self) -> bool:
        """False from a frame that did not get through (refused, or an unexpected failure)
        until one does."""
        return self._retry_at == 0.0 and self._refused == 0

    def start(self) -> Sender:
        self._thread.start()
        return self

    def put(self, topic: str, value: bytes, key: bytes | None) -> None:
        """Queue one message; never blocks."""
        with self._wake:
            if len(self._queue) >= self._max_queued:
                self._queue.popleft()
                self._queue_full(1)
            self._queue.append((topic, value, key))
            self._wake.notify()

    def _queue_full(self, n: int) -> None:
        before = self.dropped
        self._drop(n)
        if before == 0 or before // 1000 != self.dropped // 1000:
            log.error("send queue full (%d frames): dropped the oldest (%d so far)",
                      self._max_queued, self.dropped)

    def _drop(self, n: int) -> None:
        with self._wake:
            self.dropped += n
        self._on_dropped(n)

    def _run(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                wait_s = (self._retry_at - now if self._retry_at
                          else 0.0 if self._queue else self._idle_s)
                if wait_s > 0 and not self._stopping:
                    self._wake.wait(wait_s)
                stopping = self._stopping
                if self._retry_at > time.monotonic() and not stopping:
                    continue  # a new frame woke us while backing off
                batch = list(self._queue)
                self._queue.clear()
            kept = self._send(batch)
            if kept:
                self._requeue(kept)
            # Stopping: one last try each; what a failure kept back is close()'s to count.
            if stopping and (kept or not self._queue):
                return

    def _send(self, batch: list[Item]) -> list[Item]:
        """Hand ``batch`` on in order and flush; return the frames an unexpected failure
        kept back (the one that failed and those after it)."""
        for i, (topic, value, key) in enumerate(batch):
            try:
                self.producer.send(topic, value, key=key)
            except BusError as exc:  # only a producer without a spool raises here
                self._drop(1)
                log.warning("frame not sent: %s", exc)
                continue
            except ValueError as exc:
                self._refuse(topic, exc)
                continue
            except Exception:  # the thread must outlive any one failure, and so must the frames
                self._failed(len(batch) - i)
                return batch[i:]
            self._through(frame=True)
        try:
            # With nothing new this replays the spool (when its backoff allows).
            self.producer.flush()
        except BusError as exc:
            log.debug("flush: %s", exc)
        except Exception:  # what was handed on is the producer's; nothing to keep here
            self._failed(0)
        else:
            self._through(frame=False)
        return []

    def _refuse(self, topic: str, exc: ValueError) -> None:
        self._drop(1)
        self._refused += 1
        if self._refused == 1 or self._refused % 1000 == 0:
            log.error("frame for topic %r refused by the producer, dropped (%d in a row): %s",
                      topic, self._refused, exc)

    def _failed(self, kept: int) -> None:
        if not self._retry_at:
            log.exception("sender: unexpected failure (%d frames kept in the queue); "
                          "trying again with backoff", kept)
        else:
            log.debug("sender: still failing (%d tries)", self._backoff.failures + 1,
                      exc_info=True)
        # Never 0.0 while failing: 0.0 means "not failing".
        self._retry_at = time.monotonic() + max(self._backoff.next(), 1e-9)

    def _through(self, frame: bool) -> None:
        """A send (``frame``) or a flush that raised nothing: the failure has passed.

        Only a frame taken shows that the producer takes frames again, after refusals.
        """
        if self._retry_at or (frame and self._refused):
            log.info("sender: frames get through again (after %d failures, %d refused)",
                     self._backoff.failures, self._refused)
            self._retry_at = 0.0
            self._backoff.reset()
        if frame:
            self._refused = 0

    def _requeue(self, kept: list[Item]) -> None:
        """Put ``kept`` back at the head of the queue, in order, within its bound."""
        with self._wake:
            if self._closed:  # close() has counted the queue already; these die with it
                self._drop(len(kept))
                log.error("sender closed: %d frames not handed on are lost", len(kept))
                return
            self._queue.extendleft(reversed(kept))
            over = len(self._queue) - self._max_queued
            for _ in range(max(over, 0)):
                self._queue.popleft()
            if over > 0:
                self._queue_full(over)

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued (within ``timeout_s``) and stop the thread.

        Frames still queued then are lost with the process: counted as dropped
        (``on_dropped``, the agent's ``/metrics``), never only logged.
        """
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        with self._wake:
            self._closed = True
            lost = len(self._queue)
            self._queue.clear()
        if lost:
            self._drop(lost)
            log.error("sender stopped with %d frames not handed on: they are lost", lost)
