"""``Sender``: publishing on its own thread, so that sampling never waits for the network.

The sampling loop hands each encoded frame to ``put`` (a deque append, never
blocking); the sender thread sends what is queued, in order, then flushes. Behind
it the ``SpoolingProducer`` spools and replays: a broker that is away costs the
sender thread its waits (``max_block_ms``, flush timeouts), never a sample.

What sits in the queue is in memory only until the sender hands it on (at most
one flush, a few seconds while the broker is away). The queue is bounded
(``max_queued``): past it the oldest frames are dropped and counted, so a sender
stuck for hours cannot take the node's memory.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from fleetwatch.pipeline.bus import BusError, Producer

log = logging.getLogger(__name__)

Item = tuple[str, bytes, bytes | None]


class Sender:
    def __init__(self, producer: Producer, on_dropped: Callable[[int], None] | None = None,
                 max_queued: int = 100_000, idle_s: float = 1.0) -> None:
        self.producer = producer
        self._on_dropped = on_dropped or (lambda n: None)
        self._queue: deque[Item] = deque()
        self._max_queued = max_queued
        self._idle_s = idle_s
        self._wake = threading.Condition()
        self._stopping = False
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="fleetwatch-sender", daemon=True)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def start(self) -> Sender:
        self._thread.start()
        return self

    def put(self, topic: str, value: bytes, key: bytes | None) -> None:
        """Queue one message; never blocks."""
        with self._wake:
            if len(self._queue) >= self._max_queued:
                self._queue.popleft()
                self.dropped += 1
                self._on_dropped(1)
                if self.dropped == 1 or self.dropped % 1000 == 0:
                    log.error("send queue full (%d frames): dropped the oldest (%d so far)",
                              self._max_queued, self.dropped)
            self._queue.append((topic, value, key))
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._queue and not self._stopping:
                    self._wake.wait(self._idle_s)
                batch = list(self._queue)
                self._queue.clear()
                stopping = self._stopping
            try:
                self._send(batch)
            except Exception:  # the thread must outlive any one failure
                log.exception("sender: unexpected failure")
            if stopping and not self._queue:
                return

    def _send(self, batch: list[Item]) -> None:
        for topic, value, key in batch:
            try:
                self.producer.send(topic, value, key=key)
            except BusError as exc:  # only a producer without a spool raises here
                self.dropped += 1
                self._on_dropped(1)
                log.warning("frame not sent: %s", exc)
        try:
            # With nothing new this replays the spool (when its backoff allows).
            self.producer.flush()
        except BusError as exc:
            log.debug("flush: %s", exc)

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued (within ``timeout_s``) and stop the thread."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._queue:
            log.warning("sender stopped with %d frames not handed on", len(self._queue))
