"""Alert sinks behind one ``AlertSink`` protocol, and the ``Notifier`` that feeds them.

The processor hands every batch's alert changes to ``Notifier.send`` once
they are in the store. The notifier works out who should hear about each
change (silences, inhibition, acknowledgements: ``fleetwatch.pipeline.silences``),
forwards each alert's state changes once (dedup), and delivers them to every
sink on its own thread, retrying a failing sink with the shared ``Backoff``
a bounded number of times. A sink that is down never stops or slows the
processor: its deliveries are retried, then counted as failed and logged;
the store's record of the alert was written before, by the processor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetwatch.pipeline.alerts import Key, alert_key, scope_of
from fleetwatch.pipeline.silences import NODE_COVER_RULES, Notice, mute
from fleetwatch.pipeline.sinks.base import AlertSink, SinkError, SinkRejected
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from fleetwatch.retry import Backoff, retry

__all__ = ["AlertSink", "Notifier", "SinkCounts", "SinkError", "SinkRejected",
           "SinkStats"]

log = logging.getLogger(__name__)

# An item of the delivery thread's queue: ("send", notices), ("adopt", alerts) or
# ("forget", nodes).
_Work = tuple[str, Any]


@dataclass
class SinkCounts:
    """One sink's counters (batches of alert changes)."""

    sent: int = 0           # delivered
    failed: int = 0         # given up after the last attempt, or refused
    dropped: int = 0        # never tried: the queue was full
    retries: int = 0


@dataclass
class SinkStats:
    delivered: int = 0      # batches delivered
    retries: int = 0
    failed: int = 0         # batches given up after the last attempt, or refused
    dropped: int = 0        # batches dropped because the queue was full
    last_error: str = ""
    by_sink: dict[str, int] = field(default_factory=dict)  # failed batches per sink
    sinks: dict[str, SinkCounts] = field(default_factory=dict)  # every counter, per sink


class Notifier:
    """Fans alert changes out to sinks; the processor's one alert hook (``send``).

    ``silences`` and ``acks`` are read (e.g. from the store) at most every
    ``reload_s`` seconds. With ``background`` False, ``send`` delivers before it
    returns (replays, tests); else a thread does, from a queue of at most
    ``queue_max`` batches (the oldest dropped, and counted, beyond that).

    Open alerts follow the processor's partitions: ``adopt`` takes over the
    alerts of nodes it now owns, ``forget`` lets go of those of nodes that
    moved to another processor (which adopts them). Both reach the sinks
    through the same queue as the changes, so a sink sees them in order.
    """

    def __init__(self, sinks: Sequence[AlertSink],
                 silences: Callable[[], Iterable[Silence]] = lambda: (),
                 acks: Callable[[], Iterable[Acknowledgement]] = lambda: (),
                 reload_s: float = 30.0, attempts: int = 4,
                 backoff: Callable[[], Backoff] = lambda: Backoff(0.5, 8.0),
                 background: bool = True, queue_max: int = 10_000,
                 tick_s: float = 1.0) -> None:
        self.sinks = list(sinks)
        self.stats = SinkStats(sinks={sink.name: SinkCounts() for sink in self.sinks})
        self._silences_of, self._acks_of = silences, acks
        self._silences: list[Silence] = []
        self._acks: dict[str, Acknowledgement] = {}
        self._reload_s, self._reloaded = reload_s, float("-inf")
        self._now = float("-inf")  # the stream's time: the newest frame's (see ``send``)
        self._attempts, self._backoff = attempts, backoff
        self._open: dict[Key, Alert] = {}
        self._sent: dict[str, tuple[str, str]] = {}  # alert id -> (state, muted_by) forwarded
        # Work for the delivery thread, in order: changes to send, alerts adopted, nodes
        # forgotten. Only batches of changes count against ``queue_max``.
        self._queue: deque[_Work] = deque()
        self._queue_max = queue_max
        self._batches = 0
        self._cv = threading.Condition()
        self._stop = threading.Event()
        self._tick_s = tick_s
        self._thread: threading.Thread | None = None
        if background and self.sinks:
            self._thread = threading.Thread(target=self._loop, name="alert-sinks", daemon=True)
            self._thread.start()

    # -- the processor's side ----------------------------------------------
    def adopt(self, alerts: Iterable[Alert]) -> None:
        """Take over alerts already open (reloaded at start, or from partitions this member
        now owns) without notifying them again; sinks that keep firing alerts alive
        (Alertmanager) carry on re-sending them."""
        alerts = [a for a in alerts if a.state != "resolved"]
        for a in alerts:
            self._open[alert_key(a)] = a
            self._sent[a.id] = (a.state, "")
        firing = [a for a in alerts if a.state == "firing"]
        if firing:
            self._hand_over("adopt", firing)

    def forget(self, nodes: Iterable[str]) -> None:
        """Let go of the open alerts of these nodes (their partition moved to another
        processor, which adopts them): no longer re-sent from here, and a later change of
        one is new to this notifier. A ``Processor``'s ``on_revoked`` hook."""
        gone = set(nodes)
        for key in [k for k, a in self._open.items() if a.node in gone]:
            self._sent.pop(self._open.pop(key).id, None)
        if gone:
            self._hand_over("forget", gone)

    def _hand_over(self, kind: str, what: Any) -> None:
        """``adopt`` or ``forget`` at every sink that has it, after what is queued."""
        if not any(callable(getattr(sink, kind, None)) for sink in self.sinks):
            return
        if self._thread is None:
            self._apply(kind, what)
            return
        with self._cv:
            self._queue.append((kind, what))
            self._cv.notify()

    def _apply(self, kind: str, what: Any) -> None:
        for sink in self.sinks:
            call = getattr(sink, kind, None)
            if callable(call):
                try:
                    call(what)
                except Exception:  # noqa: BLE001 - a sink's bug must not stop the others
                    log.exception("alert sink %s: %s failed", sink.name, kind)

    def send(self, changes: Sequence[Alert], now: float | None = None) -> list[Notice]:
        """Take one batch's stored alert changes (none, to let time pass); returns what is
        forwarded to sinks. ``now``: the batch's newest frame time.

        Whenever silences and acknowledgements are reloaded, every open alert is judged
        again: one that does not change (a latched XID, a silent node) is muted by a
        silence added after its last change, and notified again when the silence ends.
        """
        if now is not None:
            self._now = max(self._now, now)
        for a in changes:
            self._now = max(self._now, a.updated_ts)
        reloaded = self._reload()
        notices = []
        for a in changes:
            key = alert_key(a)
            if a.state == "resolved":
                self._open.pop(key, None)
            else:
                self._open[key] = a
        covers = self._covers()
        for a in changes:
            n = Notice(a, mute(a, covers, self._silences, self._acks, self._now))
            seen = self._sent.get(a.id)
            if seen == (a.state, n.muted_by):
                continue  # dedup: this state was forwarded already
            if a.state == "resolved":
                self._sent.pop(a.id, None)
            else:
                self._sent[a.id] = (a.state, n.muted_by)
            notices.append(n)
        notices += self._uncovered(changes, covers)
        if reloaded:
            notices += self._rejudged(changes, notices, covers)
        if notices and self.sinks:
            if self._thread is None:
                self._deliver(notices)
            else:
                with self._cv:
                    if self._batches >= self._queue_max:
                        self._drop_oldest()
                    self._queue.append(("send", notices))
                    self._batches += 1
                    self._cv.notify()
        return notices

    def _covers(self) -> list[Alert]:
        """The open alerts that may inhibit others (firing, of a node or a rack): what
        ``mute`` needs to see, so that judging every open alert is not quadratic."""
        return [a for a in self._open.values() if a.state == "firing" and (
            scope_of(a) == "rack" or scope_of(a) == "node" and a.rule in NODE_COVER_RULES)]

    def _uncovered(self, changes: Sequence[Alert], covers: list[Alert]) -> list[Notice]:
        """Open alerts that an alert resolved in this batch was inhibiting: notified now, as
        Alertmanager does once the source of an inhibition goes, rather than at their own
        next change (a latched XID has none until it resolves)."""
        gone = {f"inhibited:{a.id}" for a in changes if a.state == "resolved"}
        if not gone:
            return []
        return self._remuted({a.id for a in changes}, covers, lambda muted_by: muted_by in gone)

    def _rejudged(self, changes: Sequence[Alert], done: Sequence[Notice],
                  covers: list[Alert]) -> list[Notice]:
        """Open alerts not in this batch whose muting changed since they were forwarded (a
        silence or an acknowledgement added, a silence ended)."""
        skip = {a.id for a in changes} | {n.alert.id for n in done}
        return self._remuted(skip, covers, lambda muted_by: True)

    def _remuted(self, skip: set[str], covers: list[Alert],
                 was: Callable[[str], bool]) -> list[Notice]:
        """Open alerts forwarded before (not in ``skip``), muted then as ``was`` accepts,
        whose muting is different now: their notices, and the new muting recorded."""
        out = []
        for a in list(self._open.values()):
            seen = self._sent.get(a.id)
            if a.id in skip or seen is None or not was(seen[1]):
                continue
            n = Notice(a, mute(a, covers, self._silences, self._acks, self._now))
            if n.muted_by != seen[1]:
                self._sent[a.id] = (a.state, n.muted_by)
                out.append(n)
        return out

    def _reload(self) -> bool:
        """Read silences and acknowledgements again if ``reload_s`` has passed; whether
        it did."""
        now = time.monotonic()
        if now - self._reloaded < self._reload_s:
            return False
        self._reloaded = now
        try:
            self._silences = list(self._silences_of())
            self._acks = {a.alert_id: a for a in self._acks_of()}
        except Exception as exc:  # a store hiccup keeps the last known silences
            log.warning("could not reload silences and acknowledgements: %s", exc)
        return True

    def _drop_oldest(self) -> None:
        """Drop the oldest batch of changes (never an adopt or forget); with ``_cv`` held."""
        for i, (kind, _) in enumerate(self._queue):
            if kind == "send":
                del self._queue[i]
                self._batches -= 1
                break
        self.stats.dropped += 1
        for counts in self.stats.sinks.values():
            counts.dropped += 1
        log.error("alert sinks are %d batches behind; dropping the oldest", self._batches)

    # -- the delivery thread -----------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set() or self._queue:
            with self._cv:
                if not self._queue and not self._stop.is_set():
                    self._cv.wait(self._tick_s)
                work = self._queue.popleft() if self._queue else None
                if work is not None and work[0] == "send":
                    self._batches -= 1
            if work is not None:
                kind, what = work
                if kind == "send":
                    self._deliver(what)
                else:
                    self._apply(kind, what)
            self._tick()

    def _tick(self) -> None:
        for sink in self.sinks:
            tick = getattr(sink, "tick", None)
            if tick is not None:
                self._call(sink, tick)

    def _deliver(self, notices: list[Notice]) -> None:
        for sink in self.sinks:
            if self._call(sink, lambda s=sink: s.send(notices)):
                self.stats.delivered += 1
                self._counts(sink).sent += 1

    def _counts(self, sink: AlertSink) -> SinkCounts:
        return self.stats.sinks.setdefault(sink.name, SinkCounts())

    def _call(self, sink: AlertSink, call: Callable[[], None]) -> bool:
        def on_retry(exc: BaseException, attempt: int, delay: float) -> None:
            self.stats.retries += 1
            self._counts(sink).retries += 1
            log.warning("alert sink %s: %s; retry %d in %.1fs", sink.name, exc, attempt, delay)

        try:
            retry(call, retryable=(SinkError,), attempts=self._attempts,
                  backoff=self._backoff(), on_retry=on_retry,
                  sleep=lambda s: self._stop.wait(s) and None)
            return True
        except (SinkError, SinkRejected) as exc:
            self.stats.failed += 1
            self._counts(sink).failed += 1
            self.stats.by_sink[sink.name] = self.stats.by_sink.get(sink.name, 0) + 1
            self.stats.last_error = f"{sink.name}: {exc}"
            log.error("alert sink %s failed, changes not delivered there: %s", sink.name, exc)
            return False

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (within ``timeout_s``), then close the sinks."""
        self._stop.set()
        with self._cv:
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for sink in self.sinks:
            sink.close()
