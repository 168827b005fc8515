"""Alert sinks behind one ``AlertSink`` protocol, and the ``Notifier`` that feeds them.

The processor hands every batch's alert changes to ``Notifier.send`` once
they are judged: after they are stored, or at once while the store is away
(they are stored once it is back). The notifier works out who should hear about each
change (silences, inhibition, acknowledgements: ``fleetwatch.pipeline.silences``),
forwards each alert's state changes once (dedup), and delivers them to each
sink on that sink's own thread (``delivery.Lane``): a sink that is slow or
down delays only itself, never the processor or another sink. A failing
sink is retried with the shared ``Backoff`` a bounded number of times; a
notifying sink's undelivered changes are then held (the latest per alert)
and retried for ``retry_s``, then counted as failed and logged; the store's
record of the alert is the processor's to write.

The ``Notifier`` coordinates; the judgement is in modules beside it: what may mute an
open alert (``covers``), the silences and acknowledgements in force (``mutes``), whether
an un-muted change is news to a receiver (``news``), the open alerts whose muting a
batch changes though they did not change (``rejudge``), the record of what was notified
(``notified``) and the re-sends at a takeover (``takeover``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from fleetwatch.pipeline.alert_keys import Key, alert_key, revision
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.base import AlertSink, SinkError, SinkRejected
from fleetwatch.pipeline.sinks.covers import covers_of, replaced_first
from fleetwatch.pipeline.sinks.delivery import Lane, SinkCounts, SinkStats
from fleetwatch.pipeline.sinks.mutes import Mutes
from fleetwatch.pipeline.sinks.news import RECOVERY_HOLD_S, News, Sent
from fleetwatch.pipeline.sinks.notified import Recorder, Reports
from fleetwatch.pipeline.sinks.rejudge import Rejudging
from fleetwatch.pipeline.sinks.takeover import (
    adopt_at_sinks,
    held_over,
    read_record,
    resend_undelivered,
    told_before,
)
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Notification, Silence
from fleetwatch.retry import Backoff

__all__ = ["AlertSink", "Notifier", "SinkCounts", "SinkError", "SinkRejected",
           "SinkStats"]

log = logging.getLogger(__name__)


class Notifier(Rejudging):
    """Fans alert changes out to sinks; the processor's one alert hook (``send``).

    ``silences`` and ``acks`` are read (e.g. from the store) at most every
    ``reload_s`` seconds of ``clock`` (the wall's; a replay passes its stream's
    time, so that it does not depend on how fast the machine replays); after each
    read, a sink with a ``mutes`` method gets them (``mutes(silences, acks)``, on
    its own thread, before the changes judged with them). With ``background``
    False, ``send`` delivers before it returns (replays, tests); else each sink
    has a thread of its own, fed from a queue of at most ``queue_max`` batches
    (the oldest dropped, and counted, beyond that), which also calls the sink's
    ``tick`` every ``tick_s``. A notifying sink that stays down after
    ``attempts`` tries has its changes held (the latest per alert) and retried
    for ``retry_s`` (0: not held).

    Open alerts follow the processor's partitions: ``adopt`` takes over the
    alerts of nodes it now owns, ``forget`` lets go of those of nodes that
    moved to another processor (which adopts them). Both reach each sink
    through the same queue as the changes, so a sink sees them in order.

    ``record`` (the store's ``write_notifications``) gets, at each ``send`` (and at
    ``record_reported``, each idle tick, and ``close``), what each notifying sink's lane
    reported delivered (``sent``) or not (``given_up``, ``failed``) since, and the batch's
    changes before they are handed to the lanes: muted there, or ``queued`` (owed until
    an outcome; ``sinks.notified``).
    ``recorded`` (the store's ``notifications``, read by alert ids) lets ``adopt`` re-send
    the firing, un-muted alerts the record shows a notifying sink never took (a
    predecessor gave them up, or was killed before an outcome): once, to that sink, with
    the same ``notification_id`` (a receiver that got it before can tell).
    """

    def __init__(self, sinks: Sequence[AlertSink],
                 silences: Callable[[], Iterable[Silence]] = lambda: (),
                 acks: Callable[[], Iterable[Acknowledgement]] = lambda: (),
                 reload_s: float = 5.0, attempts: int = 4,
                 backoff: Callable[[], Backoff] = lambda: Backoff(0.5, 8.0),
                 background: bool = True, queue_max: int = 10_000,
                 tick_s: float = 1.0, retry_s: float = 600.0,
                 record: Callable[[Sequence[Notification]], None] | None = None,
                 recorded: Callable[[Sequence[str]], Iterable[Notification]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sinks = list(sinks)
        self._recorded, self._background = recorded, background
        self._reports = Reports()  # what the lanes reported, recorded on this thread
        self._recorder = Recorder(record, [s.name for s in self.sinks
                                           if getattr(s, "notify_only", False)])
        self.stats = SinkStats(sinks={sink.name: SinkCounts() for sink in self.sinks})
        self._mutes = Mutes(silences, acks, reload_s, clock)
        self._rejudge = False  # judge every open alert at the next send (after an adopt)
        self._now = float("-inf")  # the stream's time: the newest frame's (see ``send``)
        self._open: dict[Key, Alert] = {}
        # alert id -> (state, muted_by, revision, severity) forwarded: a new revision
        # (another XID joined an open XID alert) or severity (a room back under its
        # critical line: a warning again) is forwarded again, like a state change; the
        # first revision (1) of an alert adopted without one (an older release's) is not.
        self._sent: dict[str, Sent] = {}
        self._news = News()  # what receivers heard: an un-muted alert may be no news
        lock = threading.Lock()  # the lanes' counters
        self._lanes = [Lane(sink, self.stats, lock, attempts=attempts, backoff=backoff,
                            retry_s=retry_s, queue_max=queue_max, tick_s=tick_s,
                            background=background,
                            outcome=functools.partial(self._reports.add, sink.name))
                       for sink in self.sinks]

    # -- the processor's side ----------------------------------------------
    def adopt(self, alerts: Iterable[Alert]) -> None:
        """Take over alerts already open (reloaded at start, or from partitions this member
        now owns) without notifying them again; sinks that keep firing alerts alive
        (Alertmanager) carry on re-sending them.

        Each is judged first against the silences, acknowledgements and inhibitions in
        force (read again now), so that a sink that re-sends it knows it is muted; as
        the stream's time is not known before the first batch, every open alert is
        judged again at the next ``send``. A muted one that the store's record shows
        every notifying sink was told of before, unchanged since (``told_before``), is
        no news when its muting ends, as for the processor that ran through it."""
        alerts = [a for a in alerts if a.state != "resolved"]
        if not alerts:
            return
        self._reload(force=True)
        for a in sorted(alerts, key=lambda x: (x.started_ts, x.id)):
            self._open[alert_key(a)] = a  # of a duplicate (an older store's), the newer
        covers = covers_of(self._open.values())
        at = self._now if self._now > float("-inf") else time.time()
        firing = []
        for a in alerts:
            n = Notice(a, self._mutes.mute(a, covers.of(a), at))
            self._sent[a.id] = (a.state, n.muted_by, revision(a), a.severity)
            if a.state == "firing":
                firing.append(Notice(self._join(a, covers), n.muted_by))
                if not n.muted_by:
                    self._news.heard(a)
        self._rejudge = True
        if firing:
            rows = read_record(self._recorded, firing)
            if rows is not None:  # told before it was muted, unchanged: no news at its end
                for a in alerts:
                    if self._sent[a.id][1] and told_before(a, self._recorder.sinks, rows):
                        self._news.heard(a)
            # Un-muted as their rack came back, held by the processor before: held still.
            held = ({} if rows is None else
                    held_over(self._recorded, firing, rows, RECOVERY_HOLD_S))
            self._news.held_over(held)
            adopt_at_sinks(self._lanes, firing, rows, held)
            if rows is not None:
                resend_undelivered(self._lanes, [n for n in firing if not n.muted_by
                                                 and n.alert.id not in held], rows)

    def record_reported(self) -> bool:
        """Record what the lanes reported since the last record, if anything (the
        processor's thread, each ``tick`` while no frame comes): an outcome waits for no
        batch, so a processor restarted meanwhile does not re-send a page delivered. No
        store write when nothing was reported; whether one was tried."""
        if not self._reports.pending():
            return False
        self._record([])
        return True

    def _record(self, notices: Sequence[Notice], handed: float | None = None) -> None:
        """Record the lanes' reports so far and ``notices`` (handed to the lanes at
        ``handed``, the wall clock), muted or queued."""
        reported = self._reports.take()
        for _, told, outcome, _ in reported:
            if outcome in ("given_up", "failed"):  # a receiver was not told of it
                self._news.not_told(told)
        self._recorder.outcomes(reported, notices, self._now, handed)

    def forget(self, nodes: Iterable[str]) -> None:
        """Let go of the open alerts of these nodes (their partition moved to another
        processor, which adopts them): no longer re-sent from here, and a later change of
        one is new to this notifier. A ``Processor``'s ``on_revoked`` hook."""
        gone = set(nodes)
        for key in [k for k, a in self._open.items() if a.node in gone]:
            gone_id = self._open.pop(key).id
            self._sent.pop(gone_id, None)
            self._news.forget(gone_id)
        if gone:
            self._hand_over("forget", gone)

    def let_go(self, alerts: Iterable[Alert]) -> None:
        """Let go of these open alerts (a rack's ``rack_silent``, whose rack another member
        judges now and re-sends): as ``forget``, by alert."""
        ids = {a.id for a in alerts}
        for key in [k for k, a in self._open.items() if a.id in ids]:
            del self._open[key]
        for i in ids:
            self._sent.pop(i, None)
            self._news.forget(i)
        if ids:
            self._hand_over("let_go", ids)

    def _hand_over(self, kind: str, what: Any) -> None:
        """``adopt``, ``forget`` or ``mutes`` at every sink that has it, after what is
        queued for it."""
        for lane in self._lanes:
            if callable(getattr(lane.sink, kind, None)):
                lane.put(kind, what)

    def send(self, changes: Sequence[Alert], now: float | None = None,
             current: Iterable[Alert] = (), stored: bool = True,
             clearing: Collection[str] | None = None) -> list[Notice]:
        """Take one batch's stored alert changes (none, to let time pass); returns what is
        forwarded to sinks. ``now``: the batch's newest frame time.

        Whenever silences and acknowledgements are reloaded, every open alert is judged
        again: one that does not change (a latched XID, a silent node) is muted by a
        silence added after its last change, and notified again when the silence ends
        (not where ``News.notice`` says it is no news).
        ``current``: the open alerts as the lifecycle has them now, newer than their last
        write (at most its ``refresh_s``): one notified again is notified as it is now.
        ``stored`` False: the changes could not be stored (the store is away): they are
        handed to the sinks first and recorded after, so a store that hangs does not hold
        a page back (as while the record is refused).
        ``clearing``: the ids of the firing alerts whose subject is clear again, held firing
        by ``keep_firing_s`` (``AlertBook.clearing``; None: as last said): one un-muted
        then (a node rebooted within its silence) is not paged as firing.
        """
        if clearing is not None:
            self._news.clearing(clearing)
        for a in current:
            key = alert_key(a)
            held = self._open.get(key)
            if held is not None and held.id == a.id and a.updated_ts > held.updated_ts:
                self._open[key] = a
        if now is not None:
            self._now = max(self._now, now)
        for a in changes:
            self._now = max(self._now, a.updated_ts)
        reloaded = self._reload() or self._rejudge
        self._rejudge = False
        notices = []
        for a in changes:
            key = alert_key(a)
            if a.state == "resolved":
                held = self._open.get(key)
                if held is None or held.id == a.id:  # not the newer one of a duplicate
                    self._open.pop(key, None)
            else:
                self._open[key] = a
        covers = covers_of(self._open.values())
        for a in changes:
            seen = self._sent.get(a.id)
            n = self._news.notice(
                a, self._mutes.mute(a, covers.of(a), self._now), seen)
            if (seen is not None and seen[2] is None and seen[:2] == (a.state, n.muted_by)
                    and (revision(a) or 0.0) <= 1.0):
                # An older release's alert taking its first revision (its own code seen
                # again) is no news; a higher one means a code joined it since: news.
                seen = (*seen[:2], revision(a), seen[3])
            if seen == (a.state, n.muted_by, revision(a), a.severity):
                self._sent[a.id] = seen
                continue  # dedup: this state (revision, severity) was forwarded already
            if a.state == "resolved":
                self._sent.pop(a.id, None)
            else:
                self._sent[a.id] = (a.state, n.muted_by, revision(a), a.severity)
            notices.append(n)
        notices += self._uncovered(changes, covers)
        notices += self._unexplained(changes, covers, notices)
        if reloaded:
            notices += self._rejudged(changes, notices, covers)
        notices += self._news.back(notices, self._open.values(), self._sent, self._now)
        notices = self._joined(notices, covers)
        self._news.notified(notices)
        # Recorded before it is handed over (one write, with the lanes' reports so far): a
        # processor killed before a lane's outcome leaves them owed (``queued``), re-sent
        # by the next one. Not while the store is away: the page goes first.
        handed, first = time.time(), stored and not self._recorder.failing
        if first:
            self._record(notices, handed)
        for lane in self._lanes:
            for part in replaced_first(notices):
                lane.put("send", part)
            if not notices:
                lane.service()
        if not first or not self._background:  # (without threads: delivered already)
            self._record([] if first else notices, handed)
        return notices

    def outages(self) -> dict[str, tuple[bool, int, float]]:
        """Per sink: (down, alert changes held for it, seconds the oldest has waited)."""
        return {lane.sink.name: lane.outage() for lane in self._lanes}

    def _reload(self, force: bool = False) -> bool:
        """Read silences and acknowledgements again if ``reload_s`` has passed (or
        ``force``), and hand them to the sinks that mirror them; whether it did."""
        read = self._mutes.reload(force)
        if read is None:
            return False
        if read:
            self._hand_over("mutes", (list(self._mutes.silences), dict(self._mutes.acks)))
        return True

    def close(self, timeout_s: float = 10.0) -> list[str]:
        """Deliver what is queued, with one last try for what a sink that is down holds,
        within ``timeout_s`` in all (the lanes close side by side; a last try is made only
        if the sink's timeout fits); what a lane could not deliver by then is logged once
        (how many alert changes, the first ids) and counted as failed. Then close the
        sinks (one that fails to is logged, and its ``close_error`` kept). The processor's
        whole stop must stay within systemd's TimeoutStopSec (60 s): this takes at most
        ``timeout_s``. Returns the sinks whose changes the deadline cut (still waiting on
        the sink, or no time left for a last try), as against a sink's own failure."""
        deadline = time.monotonic() + timeout_s
        for lane in self._lanes:
            lane.stop(deadline)
        for lane in self._lanes:
            if not lane.join(deadline - time.monotonic()):
                lane.abandon(f"still waiting for the sink after {timeout_s:g}s")
        # What the lanes delivered or gave up at the end (and what the store refused
        # before: a last try).
        self._record([])
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001 - the other sinks still close
                log.error("alert sink %s: closing it failed: %s", sink.name, exc)
                # The lanes have ended: nothing else writes the counts now.
                self.stats.sinks.setdefault(sink.name, SinkCounts()).close_error = str(exc)
        return [lane.sink.name for lane in self._lanes if lane.cut]

