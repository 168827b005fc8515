"""A lane's outage (``pipeline.sinks.delivery``): changes held while its sink is down,
retried with capped backoff, given up after ``retry_s`` or at close, and the lane's
counters; logged when the outage starts, when changes are first given up and when the
sink is back. ``Lane`` owns the queue and its thread and calls into this; the state
used here is set up in ``Lane.__init__``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.base import (
    AlertSink,
    SinkError,
    SinkMisconfigured,
    SinkRedirected,
    SinkRejected,
)
from fleetwatch.retry import Backoff

if TYPE_CHECKING:
    from fleetwatch.pipeline.sinks.delivery import SinkCounts, SinkStats
    from fleetwatch.pipeline.sinks.grouping import Grouping

log = logging.getLogger("fleetwatch.pipeline.sinks")

# At close, the first alert ids named in the log line of those not delivered.
IDS_SHOWN = 5


@dataclass
class _Held:
    notice: Notice
    held_at: float      # when this alert's latest change was held
    batch: int          # the batch it came in


class LaneOutage:
    """The outage half of a ``Lane``: holding, retrying, giving up, and counting."""

    sink: AlertSink
    _stats: SinkStats
    _counts: SinkCounts
    _lock: threading.Lock
    _clock: Callable[[], float]
    _retry_s: float
    _tick: Callable[[], Any] | None
    _cv: threading.Condition
    _queue: deque[tuple[str, Any]]
    _down_since: float | None
    _retry_at: float
    _retry_backoff: Backoff
    _held: dict[str, _Held]
    _held_lock: threading.Lock
    _seq: int
    _given_up: int
    _forgotten: set[str]
    _in_flight: Sequence[Notice]
    _group: Grouping | None
    _last_error: BaseException | None
    _deadline: float
    _ended: bool
    cut: bool
    _end_lock: threading.Lock
    # Called with (notices, outcome) from this lane's thread (or the closing one) once a
    # notifying sink's changes are delivered ("sent") or not ("given_up", "failed"): the
    # notifier's record of notifications (``sinks.notified``). None: not recorded.
    _outcome: Callable[[Sequence[Notice], str], None] | None

    def _work(self, kind: str, what: Any) -> None:
        raise NotImplementedError  # the lane's: a queue item handled now

    def outage(self) -> tuple[bool, int, float]:
        """(down, alert changes held, seconds the oldest of them has waited) now: what
        ``/metrics`` shows, so that a sink that is down pages within minutes, long before
        its held changes are given up after ``retry_s``."""
        with self._held_lock:
            held = list(self._held.values())
        told = {id(n) for n in self._told([h.notice for h in held])}
        waiting = [h.held_at for h in held if id(h.notice) in told]
        oldest = self._clock() - min(waiting) if waiting else 0.0
        return self._down_since is not None, len(waiting), max(oldest, 0.0)

    def _hold(self, notices: Sequence[Notice]) -> None:
        now = self._clock()
        with self._held_lock:
            for n in notices:
                self._held.pop(n.alert.id, None)  # the newest goes last: time order
                self._held[n.alert.id] = _Held(n, now, self._seq)

    def _report(self, notices: Sequence[Notice], outcome: str) -> None:
        """Hand the notifier what became of these changes (those a person is told of)."""
        told = [n for n in notices if n.notify]
        if self._outcome is not None and told:
            self._outcome(told, outcome)

    def _posted(self, notices: Sequence[Notice]) -> list[Notice]:
        """``notices`` and what the sink added to the same delivery by itself (the webhook's
        firing alerts it had missed: ``missed``), so that its outcome is recorded for them
        too."""
        added = list(getattr(self.sink, "missed", ()) or ())
        return [*notices, *added] if added else list(notices)

    def _told(self, notices: Sequence[Notice]) -> list[Notice]:
        """The changes this sink would tell anyone of (a muted or pending change held for
        the webhook is not an alert it owes)."""
        tells = getattr(self.sink, "tells", None)
        return [n for n in notices if tells(n)] if callable(tells) else list(notices)

    def _fail(self, exc: BaseException, now: float) -> None:
        """A delivery or a tick failed: the outage starts (logged once) or goes on."""
        self._last_error = exc
        if self._down_since is None:
            self._down_since, self._given_up = now, 0
            if self._group is not None and self._group.batches:
                self._hold(self._group.take(now))  # held in order, before any newer change
            self._retry_backoff.reset()
            # Refused credentials, a redirect: wrong until someone fixes them, an error.
            level = logging.ERROR if isinstance(exc, SinkMisconfigured) else logging.WARNING
            if isinstance(exc, SinkRedirected):
                # Counted at once (fleetwatch_alert_sink_failed_total): it will not pass by
                # itself, and sink_retry_s may be long.
                self._failed(1, exc, logged=True)
            if self._held:
                log.log(level, "alert sink %s: %s; holding %d alert changes and retrying for "
                        "up to %gs (alerts.sink_retry_s)", self.sink.name, exc,
                        len(self._told([h.notice for h in self._held.values()])),
                        self._retry_s)
            else:
                log.log(level, "alert sink %s: %s; retrying", self.sink.name, exc)
        self._retry_at = now + self._retry_backoff.next()

    def _retry(self, now: float) -> None:
        """One try in an outage: the held changes (else a tick); back up, or later again."""
        held = [h.notice for h in self._held.values()]
        if not held and not callable(self._tick):
            # All given up, nothing to try with: the outage ends at the next delivery.
            self._retry_at = now + self._retry_backoff.peek()
            return
        self._in_flight = held
        told = len(self._told(held))
        try:
            # False: nothing reached the sink (only muted changes held, nothing to re-send):
            # no sign that it is back.
            went = self.sink.send(held) if held else self._tick()  # type: ignore[misc]
        except SinkError as exc:
            self._in_flight = ()
            # Down, and now refusing the credentials (it came back so configured): said once.
            newly_refused = isinstance(exc, SinkMisconfigured) and type(exc) is not type(
                self._last_error)
            self._last_error = exc
            self._count("retries")
            self._give_up(now, exc)
            self._retry_at = now + self._retry_backoff.next()
            log.log(logging.ERROR if newly_refused else logging.DEBUG,
                    "alert sink %s: still failing: %s", self.sink.name, exc)
            return
        except SinkRejected as exc:
            self._failed(len({h.batch for h in self._held.values()}), exc)
            self._report(self._posted(held), "failed")
        except Exception as exc:  # noqa: BLE001 - a sink's bug must not stop its thread
            log.exception("alert sink %s: send failed", self.sink.name)
            self._failed(len({h.batch for h in self._held.values()}), exc, logged=True)
            self._report(held, "failed")
        else:
            if went is False:
                self._in_flight = ()
                with self._held_lock:
                    self._held.clear()
                self._retry_at = now + self._retry_backoff.next()
                self._refuse_forgotten()
                return
            if held:
                self._sent()
            self._report(self._posted(held), "sent")
            resent = int(getattr(self.sink, "resent", 0) or 0)
            log.warning("alert sink %s is back after %.0fs: %d held alert changes delivered%s%s",
                        self.sink.name, now - (self._down_since or now), told,
                        f", {self._given_up} given up" if self._given_up else "",
                        f", {resent} still firing that it missed re-sent" if resent else "")
        self._in_flight = ()
        with self._held_lock:
            self._held.clear()
        self._down_since = None
        self._refuse_forgotten()

    def _give_up(self, now: float, exc: BaseException) -> None:
        """Drop the changes held longer than ``retry_s``: counted, logged the first time."""
        old = [k for k, h in self._held.items() if now - h.held_at >= self._retry_s]
        if not old:
            return
        batches = len({self._held[k].batch for k in old})
        told = self._told([self._held[k].notice for k in old])
        with self._held_lock:
            for k in old:
                del self._held[k]
        first = self._given_up == 0
        self._given_up += len(told)
        self._report(told, "given_up")
        self._failed(batches, exc, logged=True)
        if first:
            log.error("alert sink %s down for %.0fs: %d alert changes held longer than "
                      "alerts.sink_retry_s (%gs) given up, not delivered there: %s",
                      self.sink.name, now - (self._down_since or now), len(told),
                      self._retry_s, exc)
        if not self._held:
            self._refuse_forgotten()

    def _refuse_forgotten(self) -> None:
        """Held changes of nodes forgotten since were tried (a sink may take up their
        alerts again): forget them again, so this processor does not re-send another's."""
        if self._forgotten:
            gone, self._forgotten = self._forgotten, set()
            self._work("forget", gone)

    def _finish(self) -> None:
        """Closing: one last try for what is held if the sink's timeout fits before the
        deadline, then what is left is given up (logged once, counted)."""
        if not self._held:
            return
        now = self._clock()
        timeout_s = float(getattr(self.sink, "timeout_s", 0.0) or 0.0)
        if now + timeout_s <= self._deadline:
            self._retry_at = now
            self._retry(now)
            why = "the last try at close failed"
        else:
            self.cut = True
            why = f"no time left at close for a last try (the sink's timeout is {timeout_s:g}s)"
        if self._held:
            self._given_up_at_close(why)

    def _given_up_at_close(self, why: str) -> None:
        """Log once which alert changes were not delivered (held, queued, in flight) and
        count their batches as failed."""
        with self._end_lock:
            if self._ended:
                return
            self._ended = True
        with self._held_lock:
            held = list(self._held.values())
        with self._cv:
            queued = [what for kind, what in self._queue if kind == "send"]
        grouped = self._group.held if self._group is not None else []
        latest = {h.notice.alert.id: h.notice for h in held}
        latest.update((n.alert.id, n) for n in self._in_flight)
        latest.update((n.alert.id, n) for n in grouped)
        for notices in queued:
            latest.update((n.alert.id, n) for n in notices)
        told = self._told(list(latest.values()))
        if not told:
            return
        batches = len({h.batch for h in held}) + len(queued) + (
            1 if self._in_flight and not held else 0) + (
            self._group.batches if self._group is not None else 0)
        down = ("" if self._down_since is None
                else f", down for {self._clock() - self._down_since:.0f}s")
        last = f"; last error: {self._last_error}" if self._last_error is not None else ""
        ids = ", ".join(n.alert.id for n in told[:IDS_SHOWN])
        more = f" and {len(told) - IDS_SHOWN} more" if len(told) > IDS_SHOWN else ""
        self._failed(max(1, batches), SinkError(f"{len(told)} alert changes not delivered "
                                                f"({why}{last})"), logged=True)
        self._report(told, "given_up")
        log.error("alert sink %s: %d alert changes not delivered there, given up at close "
                  "(%s%s): %s%s%s", self.sink.name, len(told), why, down, ids, more, last)

    # -- counters -------------------------------------------------------------
    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            setattr(self._counts, what, getattr(self._counts, what) + n)
            setattr(self._stats, what, getattr(self._stats, what) + n)

    def _sent(self) -> None:
        with self._lock:
            self._counts.sent += 1
            self._stats.delivered += 1

    def _failed(self, batches: int, exc: BaseException, logged: bool = False) -> None:
        name = self.sink.name
        with self._lock:
            self._counts.failed += batches
            self._stats.failed += batches
            self._stats.by_sink[name] = self._stats.by_sink.get(name, 0) + batches
            self._stats.last_error = f"{name}: {exc}"
            self._counts.last_error = str(exc)
        if not logged:
            log.error("alert sink %s failed, changes not delivered there: %s", name, exc)
