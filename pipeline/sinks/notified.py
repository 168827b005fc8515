"""The record of what was notified: each alert change a notifying sink took (``sent``, once
the sink confirmed delivery: written from what its lane reports, never when the change is
only handed to it), could not be given (``given_up`` after ``alerts.sink_retry_s`` or at
close, ``failed`` when refused), or that was muted there (as it is decided), written to
the store (``Notification``), so that "who was told what, when, and why not" is answered
later from what happened, not judged again from the alerts, silences and
acknowledgements as they are by then. A processor that takes over firing alerts reads it
back to re-send those its predecessor never delivered (``undelivered``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.store.base import Notification, StoreRejected

log = logging.getLogger("fleetwatch.pipeline.sinks")

# Records kept while the store refuses them (written at the next send); beyond, the oldest
# are dropped (logged): the record must never hold the processor up.
HELD_MAX = 10_000


def records(notices: Sequence[Notice], sinks: Sequence[str], now: float,
            wall: float, outcome: str = "") -> list[Notification]:
    """The notifications of these notices at these notifying sinks: with ``outcome``
    (what a sink's lane reported: ``sent``, ``given_up``, ``failed``) those a person is
    told of (``Notice.notify``); without, ``muted`` where a silence, an inhibition or an
    acknowledgement kept it quiet (a pending or never-fired change is neither, and one to
    tell is recorded once its lane reports)."""
    out = []
    for n in notices:
        a = n.alert
        said = outcome if outcome and n.notify else "muted" if not outcome and n.muted_by \
            else ""
        if not said:
            continue
        out += [Notification(now, wall, sink, a.id, a.rule, a.severity, a.cluster, a.rack,
                             a.node, a.device, a.state, said, n.muted_by)
                for sink in sinks]
    return out


def undelivered(alert_ids: Iterable[str], sink: str,
                recorded: Iterable[Notification]) -> set[str]:
    """Of these firing alerts, those the record shows due at ``sink`` (muted there, given
    up, failed) but never ``sent`` there firing: what a predecessor did not deliver. An
    alert with no record at all there (one fired before the record existed) is not."""
    wanted = set(alert_ids)
    seen: set[str] = set()
    sent: set[str] = set()
    for r in recorded:
        if r.sink != sink or r.alert_id not in wanted:
            continue
        seen.add(r.alert_id)
        if r.outcome == "sent" and r.state == "firing":
            sent.add(r.alert_id)
    return seen - sent


def outcome_text(n: Notification) -> str:
    """What became of it at its sink, for people: ``sent to webhook``, ``muted at webhook``
    (its ``muted_by`` is the caller's to add), ``not delivered to webhook (given up)``."""
    if n.outcome == "sent":
        return f"sent to {n.sink}"
    if n.outcome == "muted":
        return f"muted at {n.sink}"
    return f"not delivered to {n.sink} ({n.outcome.replace('_', ' ')})"


class Recorder:
    """Writes notifications with ``write`` (the store's ``write_notifications``); what it
    refuses is kept (at most ``HELD_MAX``) and written with the next ones."""

    def __init__(self, write: Callable[[Sequence[Notification]], None] | None,
                 sinks: Sequence[str], clock: Callable[[], float] = time.time) -> None:
        self._write, self._sinks, self._clock = write, list(sinks), clock
        self._held: list[Notification] = []
        self._failing = False

    def record(self, notices: Sequence[Notice], now: float) -> None:
        """Record the muted ones among ``notices`` (decided now) and write."""
        self.outcomes([], notices, now)

    def outcomes(self, reported: Sequence[tuple[str, Sequence[Notice], str, float]],
                 notices: Sequence[Notice], now: float) -> None:
        """Record what the lanes reported, (sink, notices, outcome, wall clock), and the
        muted ones among ``notices``, then write."""
        if self._write is None or not self._sinks:
            return
        wall = self._clock()
        at = now if now > float("-inf") else wall
        self._held += records(notices, self._sinks, at, wall)
        for sink, these, outcome, when in reported:
            self._held += records(these, [sink], at, when, outcome)
        if not self._held:
            return
        try:
            self._write(self._held)
        except StoreRejected as exc:  # never taken: written again, refused again
            log.error("the store refused the record of %d notifications (%s); not kept",
                      len(self._held), exc)
            self._held = []
            return
        except Exception as exc:  # noqa: BLE001 - the record must not stop notifying
            if len(self._held) > HELD_MAX:
                log.error("the store refuses the record of notifications (%s); dropping "
                          "the oldest %d", exc, len(self._held) - HELD_MAX)
                self._held = self._held[-HELD_MAX:]
            if not self._failing:
                log.warning("could not record notifications in the store (%s); kept and "
                            "written again with the next ones", exc)
            self._failing = True
            return
        self._held, self._failing = [], False
