"""The processor's alert path: a batch's alert changes stored and sent, alerts judged
while the store is away (``judge``), the detectors asked when polls bring nothing
(``tick``), and the last updates written on the way out (``flush``). A mixin of
``pipeline.processor.Processor``, which holds the state it reads (see its docstring).

Alerts do not wait for the store: changes are applied to the book and sent whatever
the store says, and kept (``_unstored``) to be written with the next alert write that
succeeds. Changes the store refuses for good (``StoreRejected``) are counted and said
(``pipeline.refusals``), the others stored; they are applied and sent all the same.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fleetwatch.models import Finding
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.batches import MAX_SURPRISES, Batch, Stats
from fleetwatch.pipeline.bus import BusError
from fleetwatch.pipeline.node_states import NodeStates
from fleetwatch.pipeline.out_of_memory import out_of_memory
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.refusals import Refusals
from fleetwatch.pipeline.store.base import Alert, Event, Store, StoreError

log = logging.getLogger("fleetwatch.pipeline.processor")

# How often, at most, the detectors that judge a lack of frames (``tick``) are asked
# while polls bring nothing.
TICK_EVERY_S = 1.0


class AlertFlow:
    """``flush``, ``tick``, ``judge`` and the delivery of a batch's alert changes."""

    store: Store
    alerts: AlertBook
    stats: Stats
    ownership: Ownership
    refusals: Refusals
    _unstored: list[Alert]
    _unstored_events: list[Event]
    node_states: NodeStates
    _tickers: list[Any]
    _next_tick: float
    _notifier: Any
    _notify: Callable[[Sequence[Alert]], object] | None
    _clock: Callable[[], float]

    if TYPE_CHECKING:  # in Processor
        def _detect(self, batch: Batch, judging: bool = False) -> None: ...
        def _tell_behind(self, nodes: dict[tuple[str, str], tuple[str, int]]) -> None: ...
        def retire(self) -> None: ...

    def flush(self) -> int:
        """Write the updates of open alerts not written yet (a repeated XID counted within
        refresh_s): at the end of a replay and when the processor stops, so the store
        holds their last count. Never raises (it runs on the way out); how many written."""
        # In the order of a batch's changes: the book's own order follows the hashing of
        # its keys, which differs from run to run (a replay's lines must not).
        changes = sorted(self.alerts.unwritten(), key=lambda a: (a.updated_ts, a.id))
        if not changes:
            return 0
        try:
            self._write_alerts(changes)
        except StoreError as exc:  # the store is away: expected, said in one line
            log.error("the last updates of %d open alerts could not be stored (%s); the "
                      "store keeps their value of up to refresh_s before", len(changes), exc)
            return 0
        except Exception:
            self.stats.errors += 1
            log.exception("the last updates of %d open alerts could not be stored; the "
                          "store keeps their value of up to refresh_s before", len(changes))
            return 0
        self.alerts.apply(changes)
        if self._notifier is not None:
            self._notifier.send(changes)
        elif self._notify is not None:
            self._notify(changes)
        self.stats.alerts_written += len(changes)
        return len(changes)

    def deaf(self) -> None:
        """Polls bring nothing because the brokers are away, hang or the group rebalances:
        the time until the next ``tick`` counts for no detector (nothing was heard). What
        the notifier's lanes reported is recorded all the same (they do not need the
        brokers)."""
        for d in self._tickers:
            deaf = getattr(d, "deaf", None)
            if callable(deaf):
                deaf()
        self._record_reported()

    def tick(self, unheard_s: float = 0.0) -> None:
        """A poll brought nothing: the detectors that judge a lack of frames (``tick``:
        silent nodes, a whole fleet gone quiet) are asked on this processor's clock, at
        most every ``TICK_EVERY_S``; their alert changes are stored with their
        ``node_state`` events, and sent. Nodes of partitions just taken over are built
        first (no frame may ever come from them). ``unheard_s``: how long since the
        brokers last answered; that time is not known to be quiet yet, so the detectors
        are asked as of the last answer. Then what the notifier's lanes reported since is
        recorded: no batch may come to record it (a one-node deployment, a cluster cut off).
        Raises ``StoreError`` while the store is away (the loop pauses, as for a batch)."""
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + TICK_EVERY_S
        if self._tickers:
            self._tick_detectors(unheard_s)
        self._record_reported()

    def _record_reported(self) -> None:
        """Record what the notifier's lanes reported since (no store write if nothing)."""
        record = getattr(self._notifier, "record_reported", None)
        if callable(record):
            record()

    def _tick_detectors(self, unheard_s: float) -> None:
        self.ownership.build([], None)
        self._tell_behind(self.ownership.behind())
        wall = self._clock() - max(0.0, unheard_s)
        findings: list[Finding] = []
        for d in self._tickers:
            try:
                findings.extend(d.tick(wall))
            except Exception:  # a detector's bug must not stop the loop
                self.stats.errors += 1
                log.exception("detector %s failed while no frame came; skipped for now",
                              getattr(d, "name", type(d).__name__))
        changes = self.alerts.observe([], findings) if findings else []
        # A node silent while no frame comes: its event, as a batch would write it (its
        # "back" comes with its first frame). Kept until stored, like the alert changes.
        events = [*self._unstored_events, *self.node_states.update([], changes)]
        if not changes and not events:
            return
        writes = list({a.id: a for a in [*self._unstored, *changes]}.values())
        away: StoreError | None = None
        try:
            self._write_alerts(writes)
            self._unstored = []
            self.stats.alerts_written += len(writes)
        except StoreError as exc:  # sent all the same; written with the next write
            self._unstored, away = writes, exc
        alerts_stored = away is None
        self._unstored_events = events
        if alerts_stored:
            try:
                self.refusals.write("events", self.store.write_events, events)
                self._unstored_events = []
                for e in events:
                    self.stats.events[e.kind] = self.stats.events.get(e.kind, 0) + 1
            except StoreError as exc:
                away = exc
        if changes:
            self._send_ticked(changes, findings, stored=alerts_stored)
        self.retire()
        if away is not None:
            raise away

    def _send_ticked(self, changes: list[Alert], findings: list[Finding],
                     stored: bool = True) -> None:
        transitions = self.alerts.transitions(changes)
        self.alerts.apply(changes)
        if self._notifier is not None:
            self._notifier.send(changes, max(f.ts for f in findings), stored=stored,
                                clearing=self.alerts.clearing())
        elif self._notify is not None:
            self._notify(changes)
        self.stats.alerts_changed += transitions

    def judge(self, batch: Batch) -> bool:
        """The store is away: judge a batch whose write waits, and send its alert changes
        now. They are applied to the book and kept (``_unstored``) to be written with the
        next alert write that succeeds; the batch is not judged again once stored. False
        when it cannot be judged yet (the open alerts of partitions just taken over must be
        read from the store): judged once stored, as usual. Nodes met for the first time do
        not hold it back: they are judged without their stored boards (``_recall_boards``)."""
        if batch.judged or not batch.frames:
            return batch.judged
        try:
            self._detect(batch, judging=True)
        except StoreError:
            return False
        changes = self.alerts.observe(batch.owned, batch.findings) \
            if batch.owned or batch.findings else []
        self._unstored = list({a.id: a for a in [*self._unstored, *changes]}.values())
        self._deliver(batch, changes, stored=False)
        return True

    def _deliver(self, batch: Batch, changes: list[Alert], stored: bool = True) -> None:
        """Apply a batch's alert changes to the book and send them; the batch is judged.
        ``stored`` False: the store is away (the notifier does not wait on it first)."""
        transitions = self.alerts.transitions(changes)
        self.alerts.apply(changes)
        batch.judged = True
        self.stats.alerts_changed += transitions
        if changes and batch.messages and batch.owned:  # live: how late they go out
            self.stats.alert_delay_s = max(0.0, self._clock() - max(f.ts for f in batch.owned))
        if self._notifier is not None and (changes or batch.owned):
            # Every batch: silences added or ended since are judged on alerts that do
            # not change (a latched XID), at the stream's time.
            newest = max((f.ts for f in batch.owned or ()), default=None)
            if newest is not None and batch.messages:  # live: never ahead of our clock
                newest = min(newest, self._clock())
            self._notifier.send(changes, newest, self.alerts.open, stored=stored,
                                clearing=self.alerts.clearing())
        elif changes and self._notify is not None:
            self._notify(changes)

    def _write_alerts(self, alerts: Sequence[Alert]) -> None:
        """Write alert changes; those the store refuses for good are counted and said
        (the others stored), never raised: the book goes on with them all."""
        self.refusals.write("alert changes", self.store.write_alerts, alerts)

    def _store_alerts(self, batch: Batch, changes: list[Alert]) -> None:
        """Write a batch's alert changes, with any applied earlier and not stored yet
        (newest wins). A store that is away: they are sent anyway and kept to be written
        on the retry (``StoreError`` raised after ``_deliver``)."""
        writes = list({a.id: a for a in [*self._unstored, *changes]}.values())
        if not writes:
            return
        try:
            self._write_alerts(writes)
            self._unstored = []
            self.stats.alerts_written += len(writes)
        except (StoreError, BusError):
            self._unstored = writes
            if not batch.judged:
                self._deliver(batch, changes, stored=False)
            raise
        except Exception as exc:
            batch.failures += 1
            if batch.failures < MAX_SURPRISES or out_of_memory(exc):
                raise
            self.stats.errors += 1
            log.exception("%d alert changes not stored after %d tries; applied anyway, "
                          "and written again with the next batch", len(writes),
                          batch.failures)
            self._unstored = writes
