"""A processor's stop within one deadline, ``processor.stop_timeout_s`` from the request.

Each step of the stop had its own timeout (the batches in hand 20 s, the open alerts' last
updates the store client's retries, about 40 s, the alert sinks 10 s) and nothing bounded
their sum: with the store and Alertmanager both hung, SIGTERM took 72 s, past systemd's
TimeoutStopSec and Kubernetes' grace period of 60 s, so the unit ended "failed (timeout)"
(deploy finding 5, r22). Here every step gets what is left of one budget, counted from the
stop request; a step cut short is logged, and named in the last line. A sink that fails of
itself within the time it had (refused, unreachable, its close raising) is named there too,
with its error, apart: more time would not have mended it, so the timeout is not blamed.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("fleetwatch.process_service")

# At most this long for the batches in hand, and at most this share of the budget.
DRAIN_S, DRAIN_SHARE = 20.0, 0.45
# Kept for the alert sinks' last deliveries: at most this long, or this share.
SINKS_S, SINKS_SHARE = 10.0, 0.2


class StopBudget:
    """What is left of ``total_s`` from the moment ``stop`` was set (or from now, for a
    stop that no request started: an error)."""

    def __init__(self, stop: threading.Event, total_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total_s = total_s
        self._clock = clock
        self._at: float | None = None
        self.abandoned: list[str] = []  # cut short by the deadline (stop_timeout_s)
        self.failed: list[str] = []     # failed of themselves, within the time they had
        threading.Thread(target=self._stamp, args=(stop,), name="stop-clock",
                         daemon=True).start()

    def _stamp(self, stop: threading.Event) -> None:
        stop.wait()
        self._at = self._clock()

    def drain_s(self) -> float:
        """For the batches in hand, asked when the drain starts: at most ``DRAIN_S`` and its
        share, and never more than what is left but the sinks' share."""
        sinks = min(SINKS_S, SINKS_SHARE * self.total_s)
        return max(0.5, min(DRAIN_S, DRAIN_SHARE * self.total_s, self.left() - sinks))

    def left(self) -> float:
        at = self._at if self._at is not None else self._clock()
        return max(0.0, at + self.total_s - self._clock())

    def flush(self, processor: Any) -> None:
        """``processor.flush()`` (the open alerts' last updates), within what is left but
        the sinks' share; if the store does not answer by then it is left behind."""
        seconds = max(0.5, self.left() - min(SINKS_S, SINKS_SHARE * self.total_s))
        if not _within(processor.flush, seconds):
            self._abandon(f"the last updates of {len(processor.alerts.unwritten())} open "
                          f"alerts (the store did not answer within {seconds:.0f} s; it "
                          "keeps their value of up to refresh_s before)")

    def close_sinks(self, notifier: Any) -> None:
        """The alert sinks' last deliveries within what is left (at least a second). Each
        sink that gave changes up is named with why: the deadline (still waiting on it, or
        no time left for a last try: ``abandoned``, which names stop_timeout_s), else its
        own error (``failed``: refused, unreachable, a close that raised), which more time
        would not have mended."""
        seconds = max(1.0, self.left())
        before = {name: c.failed for name, c in _sinks(notifier).items()}
        cut = set(notifier.close(seconds) or ())
        for name, c in _sinks(notifier).items():
            why = getattr(c, "last_error", "") or "no error said"
            if name in cut:
                self._abandon(f"alert changes to sink {name} (still waiting for it after "
                              f"{seconds:.0f} s, what was left of the stop's time: {why})")
            elif c.failed > before.get(name, 0):
                self.failed.append(f"alert sink {name}: {why}")
            if getattr(c, "close_error", ""):
                self.failed.append(f"alert sink {name}: closing it failed: {c.close_error}")

    def summary(self) -> str:
        """The end of the stop line: what the deadline cut (naming stop_timeout_s), then
        what failed of itself (naming the sink and its error, never the timeout); "" when
        nothing was."""
        cut = (f"; abandoned to stop within processor.stop_timeout_s = {self.total_s:g} s: "
               f"{'; '.join(self.abandoned)}" if self.abandoned else "")
        return cut + (f"; failed at stop: {'; '.join(self.failed)}" if self.failed else "")

    def _abandon(self, what: str) -> None:
        self.abandoned.append(what)
        log.warning("stopping: abandoned %s, to stop within processor.stop_timeout_s = %g s",
                    what, self.total_s)


def _within(step: Callable[[], object], seconds: float) -> bool:
    """``step()`` in a daemon thread; False if it has not returned within ``seconds`` (it is
    left to the process's exit)."""
    t = threading.Thread(target=step, name="stop-step", daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive()


def _sinks(notifier: Any) -> dict[str, Any]:
    """The notifier's counts per sink (a copy)."""
    stats = getattr(notifier, "stats", None)
    return dict(getattr(stats, "sinks", {}) or {})


def leave(code: int, wait_s: float = 1.0) -> int:
    """``code``, once the process may exit: a thread still inside a store or sink call
    that does not return (a write to a hung server, abandoned at the stop's deadline) would
    hold the interpreter's exit until its own timeout, so after ``wait_s`` the process
    exits at once (``os._exit``), saying which. What it held was not committed: replayed.
    Returns only when no such thread is left."""
    deadline = time.monotonic() + wait_s
    for t in _held_by():
        t.join(max(0.0, deadline - time.monotonic()))
    hung = _held_by()
    if not hung:
        return code
    log.warning("exiting without waiting for %s (stuck in a call to a server that does not "
                "answer); what it held was not committed and is replayed",
                ", ".join(sorted({t.name for t in hung})))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _held_by() -> list[threading.Thread]:
    """The threads an interpreter's exit waits for."""
    return [t for t in threading.enumerate()
            if t is not threading.current_thread() and not t.daemon and t.is_alive()]
