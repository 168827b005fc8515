"""The silences and acknowledgements in force for the ``Notifier``: read (e.g. from the
store) at most every ``reload_s`` seconds of ``clock``, the last ones read kept through a
store hiccup (said once per outage, and when they are read again)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from fleetwatch.pipeline.silences import mute
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence

log = logging.getLogger("fleetwatch.pipeline.sinks")


class Mutes:
    """What may keep an alert quiet besides its covers: silences and acknowledgements."""

    def __init__(self, silences: Callable[[], Iterable[Silence]],
                 acks: Callable[[], Iterable[Acknowledgement]], reload_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: live, the wall's; a replay's is the stream's own time, so that when
        every open alert is judged again (at each reload) follows the data, not how fast
        the machine replays it."""
        self._silences_of, self._acks_of = silences, acks
        self._clock = clock
        self.silences: list[Silence] = []
        self.acks: dict[str, Acknowledgement] = {}
        self.reload_s, self._reloaded = reload_s, float("-inf")
        self._failing: float | None = None  # since when reloads fail (``clock``)

    def mute(self, a: Alert, covers: Iterable[Alert], at: float | None) -> str:
        """Why ``a`` is not notified at ``at`` (``silences.mute``), or ""."""
        return mute(a, covers, self.silences, self.acks, at)

    def reload(self, force: bool = False) -> bool | None:
        """Read silences and acknowledgements again if ``reload_s`` has passed (or
        ``force``): None if not due, else whether they were read (False: the last ones
        read stay in force)."""
        now = self._clock()
        if not force and now - self._reloaded < self.reload_s:
            return None
        self._reloaded = now
        try:
            self.silences = list(self._silences_of())
            self.acks = {a.alert_id: a for a in self._acks_of()}
        except Exception as exc:  # a store hiccup keeps the last known silences
            # Said once per outage (the store away is said by the processor already), not
            # at every reload_s through it.
            if self._failing is None:
                self._failing = now
                log.warning("could not reload silences and acknowledgements: %s; the last "
                            "ones read stay in force until the store answers (said when it "
                            "does)", exc)
            else:
                log.debug("could not reload silences and acknowledgements: %s", exc)
            return False
        if self._failing is not None:
            log.warning("silences and acknowledgements read again after %.0fs",
                        now - self._failing)
            self._failing = None
        return True
