"""One sink's delivery: its own thread and queue, its ticks, and changes held through an outage.

The ``Notifier`` decides who hears what; a ``Lane`` per sink does the talking,
so a sink that is slow or down delays only itself: another sink's changes
and its re-send ticks (Alertmanager's) keep their time.

A delivery is tried ``attempts`` times in place (with backoff). When a
notifying sink still fails (down, timeout, 5xx) and ``retry_s`` > 0, its
changes are held, one per alert (the latest change of each: a receiver that
comes back learns each alert's current state once, an alert that fired and
resolved meanwhile as resolved), and retried with capped backoff; a change
held longer than ``retry_s`` is given up and counted. The outage is logged
when it starts, when changes are first given up and when the sink is back,
not at each retry. Credentials refused (``SinkUnauthorized``: 401, 403, a proxy's 407)
and a redirect (``SinkRedirected``: 3xx, never followed) are such an outage too, not
tried again in place, the first line an error naming the setting to check; a redirect is
also counted as failed when the outage starts (it lasts until the URL is changed). A
refusal of the batch (``SinkRejected``: 400, 404, 413, 422) is never
retried. A tick (Alertmanager's re-send) that is refused, or fails with a sink's bug, is
said once, counted as failed each time, tried again with backoff, and said again once one
goes through.
Closing (``stop`` with a deadline): no more tries in place; what is held gets one
last try if the sink's timeout still fits before the deadline, and whatever is
still held, queued or in flight when the lane ends (or at the deadline, said by
the notifier for a lane still waiting on its sink) is logged once, with how many
alert changes and the first alert ids, and counted as failed. Counts of alert
changes are those the sink would tell (``tells``; the webhook's: notifications).
A sink with a ``group_s`` (the webhook's group interval) has the batches that come within
it of a post held, in order, and posted together when it ends (``grouping``; at close, at
once; before an adopt or forget the sink handles, first; into the outage's held changes if
the sink goes down meanwhile).
Record sinks (``notify_only`` False: the Kafka topic, a store) keep every
change in order, so theirs are not merged: they get the bounded attempts only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.base import AlertSink, SinkError, SinkMisconfigured, SinkRejected
from fleetwatch.pipeline.sinks.grouping import Grouping
from fleetwatch.pipeline.sinks.lane_outage import LaneOutage
from fleetwatch.retry import Backoff, retry

log = logging.getLogger("fleetwatch.pipeline.sinks")

# An item of a lane's queue: ("send", notices), ("adopt", notices), ("forget", nodes) or
# ("mutes", (silences, acks)).
Work = tuple[str, Any]


class _StopTrying(Exception):
    """No more tries in place (the lane is closing, or the sink refused the credentials):
    held (the last error is ``args[0]``)."""


@dataclass
class SinkCounts:
    """One sink's counters (batches of alert changes)."""

    sent: int = 0           # delivered
    failed: int = 0         # given up after the last attempt (or the retry window), or refused
    dropped: int = 0        # never tried: the queue was full
    retries: int = 0
    last_error: str = ""    # why the latest batch failed (what a stop line names)
    close_error: str = ""   # why closing the sink failed ("": it closed)


@dataclass
class SinkStats:
    delivered: int = 0      # batches delivered
    retries: int = 0
    failed: int = 0         # batches given up after the last attempt, or refused
    dropped: int = 0        # batches dropped because the queue was full
    last_error: str = ""
    by_sink: dict[str, int] = field(default_factory=dict)  # failed batches per sink
    sinks: dict[str, SinkCounts] = field(default_factory=dict)  # every counter, per sink


class Lane(LaneOutage):
    """Delivers to one sink, on its own thread unless ``background`` is False (then in the
    caller's, with held changes retried at its later calls and no ticks)."""

    def __init__(self, sink: AlertSink, stats: SinkStats, lock: threading.Lock, *,
                 attempts: int, backoff: Callable[[], Backoff], retry_s: float,
                 queue_max: int, tick_s: float, background: bool,
                 clock: Callable[[], float] = time.monotonic,
                 outcome: Callable[[Sequence[Notice], str], None] | None = None) -> None:
        self.sink, self._stats, self._lock = sink, stats, lock
        self._outcome = outcome if getattr(sink, "notify_only", False) else None
        self._counts = stats.sinks.setdefault(sink.name, SinkCounts())
        self._attempts, self._backoff = attempts, backoff
        self._holds = retry_s > 0 and bool(getattr(sink, "notify_only", False))
        self._retry_s, self._queue_max, self._tick_s, self._clock = (
            retry_s, queue_max, tick_s, clock)
        self._queue: deque[Work] = deque()
        self._batches = 0          # "send" items queued (only they count against queue_max)
        self._cv = threading.Condition()
        self._stop = threading.Event()
        self._tick = getattr(sink, "tick", None) if background else None
        self._next_tick = float("-inf")
        # A sink's ``group_s`` (the webhook's group interval): batches that come within it
        # of a post are posted together when it ends (``grouping``); on a thread only.
        group_s = float(getattr(sink, "group_s", 0.0) or 0.0)
        self._group = Grouping(group_s) if background and group_s > 0 else None
        self._tick_failing = False         # the last tick was refused or failed (said once)
        self._tick_backoff = backoff()
        # The outage: since when the sink fails, when to try again, what is held for it.
        self._down_since: float | None = None
        self._retry_at = float("-inf")
        self._retry_backoff = backoff()
        self._held = {}  # alert id -> its latest change held (``LaneOutage``)
        self._seq = 0              # batches seen
        self._given_up = 0         # changes given up in this outage
        self._forgotten: set[str] = set()  # nodes forgotten while changes of theirs were held
        self._held_lock = threading.Lock()  # ``_held`` is read by ``abandon`` at close
        self._in_flight: Sequence[Notice] = ()  # the changes being tried now
        self._last_error: BaseException | None = None
        self._deadline = float("inf")   # closing: when the notifier stops waiting (monotonic)
        self._ended = False             # what was left at close is logged and counted
        # Closing: what was left was given up because the deadline came (not the sink's
        # own failure): a stop line then names the stop's timeout.
        self.cut = False
        self._end_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._loop, name=f"alert-sink-{sink.name}",
                                            daemon=True)
            self._thread.start()

    # -- the notifier's side --------------------------------------------------
    def put(self, kind: str, what: Any) -> None:
        if self._thread is None:
            self._work(kind, what)
            self._service(ticks=False)
            return
        with self._cv:
            if kind == "mutes":
                # Only the newest silences matter: replace one still queued.
                for i, (k, _) in enumerate(self._queue):
                    if k == "mutes":
                        self._queue[i] = (kind, what)
                        return
            if kind == "send":
                if self._batches >= self._queue_max:
                    self._drop_oldest()
                self._batches += 1
            self._queue.append((kind, what))
            self._cv.notify()

    def service(self) -> None:
        """Without a thread: retry held changes if it is time (time passing, no changes)."""
        if self._thread is None:
            self._service(ticks=False)

    def stop(self, deadline: float = float("inf")) -> None:
        """Close: deliver what is queued, no more tries in place; ``deadline`` (this lane's
        clock) is when the notifier stops waiting for it."""
        self._deadline = deadline
        self._stop.set()
        with self._cv:
            self._cv.notify()

    def join(self, timeout_s: float) -> bool:
        """Wait for the lane to end; whether it did."""
        if self._thread is not None:
            self._thread.join(max(0.0, timeout_s))
            return not self._thread.is_alive()
        self._finish()
        return True

    def abandon(self, why: str) -> None:
        """The notifier stops waiting for this lane (closing, its thread still on a try):
        what it holds, has queued or is trying is logged and counted as not delivered."""
        self.cut = True
        self._given_up_at_close(why)

    def _drop_oldest(self) -> None:
        """Drop the oldest batch of changes (never a hand-over); with ``_cv`` held."""
        for i, (kind, _) in enumerate(self._queue):
            if kind == "send":
                del self._queue[i]
                self._batches -= 1
                break
        self._count("dropped")
        log.error("alert sink %s is %d batches behind; dropping the oldest", self.sink.name,
                  self._batches)

    # -- the lane's thread ----------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set() or self._queue:
            with self._cv:
                if not self._queue and not self._stop.is_set():
                    due = self._due()
                    self._cv.wait(None if due is None else max(0.0, due - self._clock()))
                work = self._queue.popleft() if self._queue else None
                if work is not None and work[0] == "send":
                    self._batches -= 1
            if work is not None:
                self._work(*work)
            if not self._stop.is_set():
                self._service(ticks=True)
        self._post_group()  # closing: what the group interval holds is posted now
        self._finish()

    def _due(self) -> float | None:
        """When the lane has something to do without new work: a retry, a group's post, or
        a tick."""
        if self._down_since is not None:
            return self._retry_at
        due = [t for t in (self._next_tick if callable(self._tick) else None,
                           self._group.due() if self._group is not None else None)
               if t is not None]
        return min(due) if due else None

    def _post_group(self, now: float | None = None) -> None:
        """Post the batches the group interval holds (all of them, or those due by
        ``now``)."""
        if self._group is None or (due := self._group.due()) is None:
            return
        if now is None or now >= due:
            self._deliver(self._group.take(self._clock()))

    def _service(self, ticks: bool) -> None:
        now = self._clock()
        if self._down_since is not None:
            if now >= self._retry_at:
                self._retry(now)
            return
        self._post_group(now)
        if ticks and callable(self._tick) and now >= self._next_tick:
            self._next_tick = now + self._tick_s
            try:
                went = self._tick()
            except SinkError as exc:
                self._count("retries")
                self._fail(exc, now)  # the next try re-sends; not a change lost
            except Exception as exc:  # noqa: BLE001 - a sink's bug must not stop its thread
                self._tick_failed(exc, now)
            else:
                if went is not False:  # what it re-sent by itself went through
                    self._report(self._posted(()), "sent")
                if self._tick_failing:
                    self._tick_failing = False
                    self._tick_backoff.reset()
                    log.warning("alert sink %s: its re-sends are accepted again",
                                self.sink.name)

    def _tick_failed(self, exc: Exception, now: float) -> None:
        """A tick refused (``SinkRejected``: it would be at every tick) or failing with a
        sink's bug: said the first time, counted each time, tried again with backoff."""
        self._next_tick = now + max(self._tick_s, self._tick_backoff.next())
        first = not self._tick_failing
        self._tick_failing = True
        self._failed(1, exc, logged=True)
        if not first:
            log.debug("alert sink %s: re-send still failing: %s", self.sink.name, exc)
        elif isinstance(exc, SinkRejected):
            log.error("alert sink %s: %s; its re-sends are tried again with backoff, each "
                      "refusal counted (fleetwatch_alert_sink_failed_total), said again once "
                      "one goes through", self.sink.name, exc)
        else:
            log.exception("alert sink %s: tick failed (tried again with backoff, each failure "
                          "counted, said again once one goes through)", self.sink.name)

    def _work(self, kind: str, what: Any) -> None:
        if kind == "send":
            self._seq += 1
            if self._holds and self._down_since is not None:
                self._hold(what)
            elif self._group is None:
                self._deliver(what)
            elif (batch := self._group.offer(what, self._clock())) is not None:
                self._deliver(batch)
            return
        if callable(getattr(self.sink, kind, None)):
            self._post_group()  # the sink hears what came before this, first
        if kind == "forget" and self._held:
            self._forgotten |= set(what)
        elif kind == "adopt":
            self._forgotten -= {n.alert.node for n in what}
        call = getattr(self.sink, kind, None)
        if callable(call):
            try:
                call(*what) if kind == "mutes" else call(what)
            except Exception:  # noqa: BLE001 - a sink's bug must not stop its thread
                log.exception("alert sink %s: %s failed", self.sink.name, kind)

    def _deliver(self, notices: Sequence[Notice]) -> None:
        def on_retry(exc: BaseException, attempt: int, delay: float) -> None:
            self._count("retries")  # the first logged; the rest counted
            log.log(logging.WARNING if attempt == 1 else logging.DEBUG,
                    "alert sink %s: %s; retry %d in %.1fs", self.sink.name, exc, attempt, delay)

        tried: list[SinkError] = []

        def once() -> None:
            if tried and self._holds and self._stop.is_set():
                raise _StopTrying(tried[-1])  # closing: held, and tried once more at the end
            try:
                self.sink.send(notices)
            except SinkMisconfigured as exc:  # the same setting fails the same way
                raise _StopTrying(exc) from exc
            except SinkError as exc:
                tried.append(exc)
                raise

        self._in_flight = notices
        try:
            retry(once, retryable=(SinkError,),
                  attempts=self._attempts, backoff=self._backoff(), on_retry=on_retry,
                  sleep=lambda s: self._stop.wait(s) and None)
        except (SinkError, _StopTrying) as exc:
            err = exc.args[0] if isinstance(exc, _StopTrying) else exc
            if not self._holds:
                self._failed(1, err)
                self._report(notices, "failed")
                return
            self._count("retries")
            self._hold(notices)
            self._fail(err, self._clock())
            return
        except SinkRejected as exc:
            self._failed(1, exc)
            self._report(self._posted(notices), "failed")
            return
        except Exception as exc:  # noqa: BLE001 - a sink's bug must not stop its thread
            log.exception("alert sink %s: send failed", self.sink.name)
            self._failed(1, exc, logged=True)
            self._report(notices, "failed")
            return
        finally:
            self._in_flight = ()
        self._sent()
        self._report(self._posted(notices), "sent")
