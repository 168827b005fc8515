"""``SpoolingProducer``: the agent's producer that never loses a frame to a broker outage.

It puts the on-disk ``Spool`` in front of a real ``Producer``: direct sends
while the broker is fine; on ``BusError`` the unacknowledged frames and
everything after them go to the spool, and the spool is replayed in order
(removed only once the broker acknowledged them) before direct sends resume.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fleetwatch.collectors.spool import Spool, SpoolRecord
from fleetwatch.pipeline.bus import BusError, Producer
from fleetwatch.retry import Backoff

log = logging.getLogger(__name__)

EventCallback = Callable[[str, int], None]


class SpoolingProducer:
    """A ``Producer`` that never loses a frame to a broker outage (within ``max_bytes``).

    Counters (also reported to ``on_event(name, n)``): ``sent`` acknowledged
    on the direct path, ``spooled`` written to disk, ``replayed`` acknowledged
    from the spool, ``dropped`` lost to drop-oldest. ``flush`` does not raise
    for frames it could not deliver: they are on disk and replayed by the next
    ``send``, ``flush`` or ``drain``.

    The inner producer must abandon what it holds when it raises ``BusError``
    (``KafkaProducer`` does); otherwise frames re-sent from the spool would
    also arrive from its own retries.
    """

    def __init__(self, inner: Producer, spool_dir: str | Path, max_bytes: int,
                 on_event: EventCallback | None = None, *, flush_timeout_s: float = 5.0,
                 max_unacked: int = 1000, linger_s: float = 1.0, drain_batch: int = 500,
                 drain_per_send: int = 5000, retry_min_s: float = 0.5,
                 retry_max_s: float = 10.0, segment_bytes: int | None = None,
                 fsync: bool = True) -> None:
        self.inner = inner
        try:
            self.spool = Spool(spool_dir, max_bytes, segment_bytes, fsync)
        except BaseException:
            inner.close()  # e.g. another agent holds the spool: this one does not start
            raise
        self.sent = self.spooled = self.dropped = self.replayed = 0
        self.write_errors = 0
        self._on_event = on_event
        self._flush_timeout_s = flush_timeout_s
        self._max_unacked = max_unacked
        self._linger_s = linger_s
        self._drain_batch = drain_batch
        self._drain_per_send = drain_per_send
        # Jittered, so that a rack of agents does not retry in step when the broker returns.
        self._backoff = Backoff(retry_min_s, retry_max_s) if retry_max_s > 0 else None
        self._retry_at = 0.0
        self._unacked: list[SpoolRecord] = []
        self._unacked_since = 0.0
        self._lock = threading.RLock()
        if self.spool.torn:
            self._count("dropped", self.spool.torn)

    @property
    def backlog(self) -> int:
        """Frames waiting in the spool."""
        return len(self.spool)

    @property
    def backlog_bytes(self) -> int:
        """Bytes the waiting frames take on disk."""
        return self.spool.bytes

    @property
    def reachable(self) -> bool:
        """False from a failed send or flush until the broker acknowledges again."""
        return self._retry_at == 0.0

    def _count(self, name: str, n: int) -> None:
        if n <= 0:
            return
        setattr(self, name, getattr(self, name) + n)
        if self._on_event is not None:
            self._on_event(name, n)

    def send(self, topic: str, value: bytes, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = ()) -> None:
        rec = SpoolRecord(topic, value, key, tuple(headers))
        with self._lock:
            if len(self.spool):
                # Frames behind a non-empty spool wait their turn, to keep order.
                self._to_spool([rec])
                self._drain(self._drain_per_send)
                return
            try:
                self.inner.send(topic, value, key, rec.headers)
            except BusError as exc:
                self._failed(exc)
                self._to_spool([*self._unacked, rec])
                self._unacked.clear()
                return
            if not self._unacked:
                self._unacked_since = time.monotonic()
            self._unacked.append(rec)
            if (len(self._unacked) >= self._max_unacked
                    or time.monotonic() - self._unacked_since >= self._linger_s):
                self._flush_unacked()

    def flush(self, timeout_s: float | None = None) -> None:
        with self._lock:
            self._flush_unacked(timeout_s)
            self._drain(1 << 62)

    def drain(self, max_n: int = 10_000) -> int:
        """Replay up to ``max_n`` spooled frames unless backing off; return how many."""
        with self._lock:
            return self._drain(max_n)

    def _flush_unacked(self, timeout_s: float | None = None) -> bool:
        if not self._unacked:
            return True
        try:
            self.inner.flush(self._flush_timeout_s if timeout_s is None else timeout_s)
        except BusError as exc:
            self._failed(exc)
            self._to_spool(self._unacked)
            self._unacked.clear()
            return False
        self._count("sent", len(self._unacked))
        self._unacked.clear()
        self._back(0)
        return True

    def _to_spool(self, records: Sequence[SpoolRecord]) -> None:
        try:
            dropped = self.spool.append(records)
        except OSError as exc:
            # The disk is full or the directory went read-only under us: these frames
            # are lost, and said so, but the agent goes on sampling.
            self.write_errors += 1
            log.error("spool %s: cannot write %d frames (%s); they are lost", self.spool.dir,
                      len(records), exc)
            self._count("dropped", len(records))
            return
        self._count("spooled", len(records))
        self._count("dropped", dropped)

    def _failed(self, exc: BusError) -> None:
        if self._retry_at == 0.0:
            log.warning("broker unavailable (%s); spooling frames to %s", exc, self.spool.dir)
        delay = self._backoff.next() if self._backoff is not None else 0.0
        # Never 0.0 while failing: 0.0 means "reachable".
        self._retry_at = time.monotonic() + max(delay, 1e-9)

    def _drain(self, max_n: int) -> int:
        done = 0
        while done < max_n and len(self.spool) and time.monotonic() >= self._retry_at:
            lost_before = self.spool.dropped
            batch = self.spool.peek(min(self._drain_batch, max_n - done))
            # Frames of a segment file that vanished under us (see ``Spool._read``).
            self._count("dropped", self.spool.dropped - lost_before)
            if not batch:
                continue
            n, bad = 0, 0
            try:
                for rec in batch:
                    n += 1
                    try:
                        self.inner.send(rec.topic, rec.value, rec.key, rec.headers)
                    except ValueError as exc:
                        # This message can never be sent; keeping it would block the spool.
                        log.error("dropping a spooled frame the broker refuses: %s", exc)
                        bad = 1
                        break
                self.inner.flush(self._flush_timeout_s)
            except BusError as exc:
                self._failed(exc)
                return done
            lost_before = self.spool.dropped
            self.spool.remove(n)
            self._count("replayed", n - bad)
            self._count("dropped", bad + self.spool.dropped - lost_before)
            done += n
            self._back(done)
        return done

    def _back(self, replayed: int) -> None:
        if self._retry_at:
            log.info("broker back; replayed %d spooled frames, %d left", replayed,
                     len(self.spool))
        self._retry_at = 0.0
        if self._backoff is not None:
            self._backoff.reset()

    def close(self) -> None:
        with self._lock:
            self._flush_unacked()
            self.spool.close()
            self.inner.close()
