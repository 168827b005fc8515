"""The record of what was notified: each alert change the notifier hands to a notifying
sink (or mutes there), written to the store as it is decided (``Notification``), so that
"who was told what, when, and why not" is answered later from what happened, not judged
again from the alerts, silences and acknowledgements as they are by then."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.store.base import Notification, StoreRejected

log = logging.getLogger("fleetwatch.pipeline.sinks")

# Records kept while the store refuses them (written at the next send); beyond, the oldest
# are dropped (logged): the record must never hold the processor up.
HELD_MAX = 10_000


def records(notices: Sequence[Notice], sinks: Sequence[str], now: float,
            wall: float) -> list[Notification]:
    """The notifications of these notices at these notifying sinks: ``sent`` where a
    person is told (``Notice.notify``), ``muted`` where a silence, an inhibition or an
    acknowledgement kept it quiet; a pending or never-fired change is neither."""
    out = []
    for n in notices:
        a = n.alert
        outcome = "sent" if n.notify else "muted" if n.muted_by else ""
        if not outcome:
            continue
        out += [Notification(now, wall, sink, a.id, a.rule, a.severity, a.cluster, a.rack,
                             a.node, a.device, a.state, outcome, n.muted_by)
                for sink in sinks]
    return out


class Recorder:
    """Writes notifications with ``write`` (the store's ``write_notifications``); what it
    refuses is kept (at most ``HELD_MAX``) and written with the next ones."""

    def __init__(self, write: Callable[[Sequence[Notification]], None] | None,
                 sinks: Sequence[str], clock: Callable[[], float] = time.time) -> None:
        self._write, self._sinks, self._clock = write, list(sinks), clock
        self._held: list[Notification] = []
        self._failing = False

    def record(self, notices: Sequence[Notice], now: float) -> None:
        if self._write is None or not self._sinks:
            return
        wall = self._clock()
        self._held += records(notices, self._sinks, now if now > float("-inf") else wall, wall)
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
