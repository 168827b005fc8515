"""The record of what was notified: each alert change a notifying sink was handed
(``queued``: owed, written before the lane tries the network), then took (``sent``, once
the sink confirmed delivery: written from what its lane reports), could not be given
(``given_up`` after ``alerts.sink_retry_s`` or at close, ``failed`` when refused), or that
was muted there (as it is decided), written to the store (``Notification``), so that "who
was told what, when, and why not" is answered later from what happened, not judged again
from the alerts, silences and acknowledgements as they are by then. The latest record of
an alert at a sink is what became of it (``settled`` hides a ``queued`` one an outcome
followed). A processor that takes over firing alerts (a restart, a partition moved) reads
it back to re-send those its predecessor never delivered (``undelivered``), a ``queued``
one included: a processor killed (SIGKILL, OOM, power) between handing a page to its lane
and the outcome wrote nothing else, and the page is owed still."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.store.base import Notification, StoreRejected

log = logging.getLogger("fleetwatch.pipeline.sinks")

# Records kept while the store refuses them (written at the next send); beyond, the oldest
# are dropped (logged): the record must never hold the processor up.
HELD_MAX = 10_000

# The outcome of a change handed to a notifying sink's lane, before any outcome.
QUEUED = "queued"
# The outcomes that say what became of a change a person is told of (``muted`` is not one).
TOLD = frozenset({QUEUED, "sent", "given_up", "failed"})


def records(notices: Sequence[Notice], sinks: Sequence[str], now: float,
            wall: float, outcome: str = "") -> list[Notification]:
    """The notifications of these notices at these notifying sinks: with ``outcome``
    (``queued`` as it is handed to the lanes, or what a sink's lane reported: ``sent``,
    ``given_up``, ``failed``) those a person is told of (``Notice.notify``); without,
    ``muted`` where a silence, an inhibition or an acknowledgement kept it quiet (a pending
    or never-fired change is neither)."""
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
    """Of these firing alerts, those the record shows still owed at ``sink``: the latest
    outcome of a firing change there is not ``sent`` (``queued``: the processor stopped
    before an outcome; given up, failed), or there is none but a ``muted`` one (muted
    there, never told). What a predecessor did not deliver. An alert with no record at all
    there (one fired before the record existed) is not."""
    wanted = set(alert_ids)
    last: dict[str, str] = {}
    muted: set[str] = set()
    for r in sorted(recorded, key=lambda r: (r.ts, r.sent_ts)):
        if r.sink != sink or r.alert_id not in wanted:
            continue
        if r.outcome == "muted":
            muted.add(r.alert_id)
        elif r.outcome in TOLD and r.state == "firing":
            last[r.alert_id] = r.outcome
    return {i for i, said in last.items() if said != "sent"} | (muted - set(last))


def never_told(alert_ids: Iterable[str], sink: str,
               recorded: Iterable[Notification]) -> set[str]:
    """Of these alerts, those the record shows only muted at ``sink``: never handed to it
    (no ``queued``, ``sent``, ``given_up`` or ``failed`` firing change), so the sink never
    had them (Alertmanager never had one the same-GPU covers muted from its start). An
    alert with no record there (one fired before the record existed) is not."""
    wanted = set(alert_ids)
    muted, told = set(), set()
    for r in recorded:
        if r.sink != sink or r.alert_id not in wanted:
            continue
        if r.outcome == "muted":
            muted.add(r.alert_id)
        elif r.outcome in TOLD and r.state == "firing":
            told.add(r.alert_id)
    return muted - told


def settled(notes: Sequence[Notification]) -> list[Notification]:
    """The record as people read it: a ``queued`` record followed by another of the same
    alert, sink and state (its outcome, or the change handed over again; not a muting) is
    left out; one
    that stays says its change was handed over and no outcome was recorded (the processor
    stopped first). Order kept."""
    later: dict[tuple[str, str, str], tuple[float, float]] = {}
    for n in notes:
        if n.outcome in TOLD:  # a muting after it says nothing of its delivery
            key, at = (n.alert_id, n.sink, n.state), (n.ts, n.sent_ts)
            later[key] = max(later.get(key, at), at)
    return [n for n in notes if n.outcome != QUEUED
            or later[(n.alert_id, n.sink, n.state)] <= (n.ts, n.sent_ts)]


def outcome_text(n: Notification) -> str:
    """What became of it at its sink, for people: ``sent to webhook``, ``muted at webhook``
    (its ``muted_by`` is the caller's to add), ``handed to webhook, not confirmed`` (no
    outcome recorded), ``not delivered to webhook (given up)``."""
    if n.outcome == "sent":
        return f"sent to {n.sink}"
    if n.outcome == "muted":
        return f"muted at {n.sink}"
    if n.outcome == QUEUED:
        return f"handed to {n.sink}, not confirmed"
    return f"not delivered to {n.sink} ({n.outcome.replace('_', ' ')})"


# What a lane reported of notices at its sink: (sink, notices, outcome, wall clock).
Report = tuple[str, Sequence[Notice], str, float]


class Reports:
    """What the lanes reported (each on its own thread), kept for the processor's thread
    (the store's writer) to record at its next ``send`` or idle tick."""

    def __init__(self) -> None:
        self._reported: list[Report] = []
        self._lock = threading.Lock()

    def add(self, sink: str, notices: Sequence[Notice], outcome: str) -> None:
        """A lane's report (its thread), at the wall clock now."""
        with self._lock:
            self._reported.append((sink, list(notices), outcome, time.time()))

    def pending(self) -> bool:
        """Whether anything was reported since the last ``take``."""
        with self._lock:
            return bool(self._reported)

    def take(self) -> list[Report]:
        """What was reported since the last ``take``."""
        with self._lock:
            reported, self._reported = self._reported, []
        return reported


class Recorder:
    """Writes notifications with ``write`` (the store's ``write_notifications``); what it
    refuses is kept (at most ``HELD_MAX``) and written with the next ones."""

    def __init__(self, write: Callable[[Sequence[Notification]], None] | None,
                 sinks: Sequence[str], clock: Callable[[], float] = time.time) -> None:
        self._write, self._sinks, self._clock = write, list(sinks), clock
        self._held: list[Notification] = []
        self._failing = False

    def record(self, notices: Sequence[Notice], now: float) -> None:
        """Record ``notices`` (decided now, about to be handed to the lanes) and write."""
        self.outcomes([], notices, now)

    @property
    def sinks(self) -> list[str]:
        """The notifying sinks whose notifications are recorded."""
        return list(self._sinks)

    @property
    def failing(self) -> bool:
        """Whether the last write failed (the store is away): what is held is written with
        the next ones."""
        return self._failing

    def outcomes(self, reported: Sequence[Report],
                 notices: Sequence[Notice], now: float, handed: float | None = None) -> None:
        """Record what the lanes reported, (sink, notices, outcome, wall clock), then
        ``notices``, decided now and handed to the lanes at ``handed`` (the wall clock;
        None: now): the muted ones, and those to tell as ``queued`` (owed until their lane
        reports), then write. Called before handing them over, the record of what is owed
        is in the store before any sink is tried; a report of them comes later (by the
        wall clock) than ``handed``, so it supersedes it."""
        if self._write is None or not self._sinks:
            return
        wall = self._clock()
        at = now if now > float("-inf") else wall
        for sink, these, outcome, when in reported:
            self._held += records(these, [sink], at, min(when, wall), outcome)
        said = wall if handed is None else min(handed, wall)
        self._held += records(notices, self._sinks, at, said)
        self._held += records(notices, self._sinks, at, said, QUEUED)
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
