"""The processor: consume frames, store them, detect, drive alerts.

``Processor.handle`` is the whole per-batch logic (decode, store, detect,
alert) and touches no bus; ``run`` (``pipeline.consume_loop``) is the loop
that takes the same steps over a consumer, with the store writes in writer
threads, and commits.
Offsets are committed only after the batch is in the store (at-least-once);
the store's idempotent writes make a replayed batch harmless.

No input stops the processor. What it cannot use becomes a dead letter
(``pipeline.dead_letters``) and the frames behind it go on:

* a message that does not decode (``FrameError``, the decoder's only error);
* a frame stamped further ahead of the processor's clock than ``max_clock_ahead_s``
  (``pipeline.clock_skew``): only a wrong clock does that, and one such frame would
  be the newest thing the store, the energy ledger and the detectors know;
* a frame the store refuses for good (``StoreRejected``): the frames it
  names, or, when it names none, those found by bisecting the batch, are
  dead-lettered with the store's reason; the rest is stored and committed. A frame
  refused for what it is (its time outside what the store keeps, a name it cannot
  carry: ``about_frames``) goes no further; one refused for the store's own reason
  (another writer's field type, a series limit) is still judged by the detectors and
  integrated into the energy ledger, so that alerts never depend on the store
  accepting the samples;
* an event, alert change or energy ledger row the store refuses for good: what it
  takes is stored, the rest counted and logged with the server's reason
  (``pipeline.refusals``), and the batch goes on (committed, its alerts sent);
* a batch whose write fails ``MAX_SURPRISES`` times in a row with an error
  that is neither (a bug in a store client, say): bisected the same way, the
  error as the reason, so one odd frame cannot spin the loop for ever while
  the frames the store does take are stored.

A store or bus that is away (``StoreError``, ``BusError``) is waited for:
the batches in hand are retried with backoff, and committed only once stored.
Alerts do not wait for the store: while it is away, the batches in hand, and
those polled meanwhile up to ``consume_pause.JUDGE_AHEAD_MESSAGES`` messages, are
judged (``judge``, in ``pipeline.alert_flow``) and their alert changes applied and
sent at once; they are written to the store with the next alert write that
succeeds, and a batch is judged once only. Consumption pauses beyond that bound,
and while the bus is away. A detector that raises is logged and skipped for that batch (its frames
are stored). Per-node state follows the consumer's
partitions (``pipeline.ownership``): ``on_revoked`` callbacks, and every
detector's optional ``drop(nodes)``, are called with the nodes that moved to
another member, and every detector's optional ``expect(nodes)`` with the
nodes of partitions taken over that have not sent a frame yet (``NodeSilence``
reports the ones that stay silent), its optional ``adopt(alerts)`` with the open
alerts loaded for the nodes it now owns, and its optional ``use_events(reader)`` once
with the store's event reader (lemon scores are rebuilt from it). A ``notifier``
(``AlertHook``: ``pipeline.sinks.Notifier``) follows them too: it gets each batch's
stored alert changes (``send``), the open alerts loaded for nodes this member takes
over (``adopt``) and the nodes it gives up (``forget``).

A processor catching up a backlog reads its partitions unevenly: before each batch is
judged, and on each ``tick``, every detector's optional ``behind(nodes)`` is told the
nodes of the partitions that still held messages not polled yet (the consumer's
``behind``), so that no node is judged silent on a time its partition has not reached.

A poll that brings nothing still lets time pass (``tick``): every detector's optional
``tick(wall)`` is asked on this processor's clock, at most every ``TICK_EVERY_S``, so
that a fleet that goes quiet at once is reported (``NodeSilence``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime, timezone
from typing import Protocol

from fleetwatch.codec import Decoder
from fleetwatch.frame import Frame
from fleetwatch.models import Detector, Finding
from fleetwatch.pipeline.alert_flow import AlertFlow
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.batches import Batch, Stats, bisect
from fleetwatch.pipeline.board_recall import BoardRecall
from fleetwatch.pipeline.bus import Message, Producer
from fleetwatch.pipeline.clock_skew import ClockWatch
from fleetwatch.pipeline.consume_loop import ConsumerLoop
from fleetwatch.pipeline.dead_letters import DeadLetterLog, DeadLetters
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.events import EventTracker, NodeKey
from fleetwatch.pipeline.frame_key import KeylessLog
from fleetwatch.pipeline.intake import Intake
from fleetwatch.pipeline.node_states import NodeStates
from fleetwatch.pipeline.ownership import OnRevoked, Ownership
from fleetwatch.pipeline.rack_judges import RackJudges
from fleetwatch.pipeline.refusals import Refusals, partial_dropped
from fleetwatch.pipeline.store.base import Alert, Event, Store, StoreRejected

log = logging.getLogger(__name__)



class AlertHook(Protocol):
    """Who hears about alerts: ``pipeline.sinks.Notifier``."""

    def send(self, changes: Sequence[Alert], now: float | None = None,
             current: Iterable[Alert] = (), stored: bool = True,
             clearing: Collection[str] | None = None) -> object:
        """One batch's alert changes, once judged (none: time passed; ``now`` is the
        batch's newest frame time, against which silences are judged; ``current``: the
        open alerts as the lifecycle has them now, newer than their last write;
        ``stored`` False: the store is away, they could not be stored; ``clearing``: the
        firing ones whose subject is clear again, ``AlertBook.clearing``)."""

    def adopt(self, alerts: Iterable[Alert]) -> None:
        """Open alerts of nodes this processor now owns: not new, but still open."""

    def forget(self, nodes: Iterable[str]) -> None:
        """Nodes whose partition moved to another processor."""


class Processor(Intake, BoardRecall, AlertFlow, ConsumerLoop):
    def __init__(self, store: Store, detectors: Sequence[Detector] = (),
                 dead_letters: Producer | None = None,
                 dead_letter_topic: str = "fleetwatch.frames.dead",
                 on_revoked: Sequence[OnRevoked] = (),
                 dead_letter_give_up_s: float = 60.0,
                 notify: Callable[[Sequence[Alert]], object] | None = None,
                 energy: EnergyIntegrator | None = None,
                 notifier: AlertHook | None = None, keep_firing_s: float = 0.0,
                 dead_letter_log_every_s: float = 60.0, max_clock_ahead_s: float = 300.0,
                 clock: Callable[[], float] = time.time,
                 clusters: Collection[str] = ()) -> None:
        """``max_clock_ahead_s``: frames from a bus stamped further ahead of ``clock`` are
        dead-lettered (0: none is); ``clock`` also bounds the silent-node rule's "now".
        ``clusters``: those the configuration names as this deployment's (``node.cluster``
        where set, ``alerts.clusters``): with several members, their racks are judged by the rack's
        judge though no frame of them came to it (``pipeline.rack_judges``)."""
        self.store = store
        # Energy is integrated here, once, into the store's ledger (pipeline/energy.py);
        # by default with default settings whenever the store keeps a ledger.
        if energy is None and hasattr(store, "write_energy"):
            energy = EnergyIntegrator(store)  # type: ignore[arg-type]
        self.energy = energy
        self.detectors = list(detectors)
        # Detectors that rebuild state from stored events (lemon scores) get the reader.
        for d in self.detectors:
            if callable(getattr(d, "use_events", None)):
                d.use_events(getattr(store, "events", None))
        # What each rule needs to judge a subject: an alert resolves only where it could.
        requirements = {rule: needs for d in self.detectors
                        for rule, needs in getattr(d, "rules", {}).items()}
        self.alerts = AlertBook(requirements=requirements, keep_firing_s=keep_firing_s,
                                name=self._name_board)
        self.events = EventTracker()  # XIDs, GPU state, throttle and job changes
        self.node_states = NodeStates()  # a node silent and back, from its alert and frames
        self._unstored: list[Alert] = []  # alert changes applied but not yet stored
        self._unstored_events: list[Event] = []  # node_state events of a tick, not stored yet
        # Nodes met while the store was away, their boards not recalled: their first frame,
        # compared with the stored boards once the store answers (``_recall_late``).
        self._unrecalled: dict[NodeKey, Frame] = {}
        self._enrichers = [d for d in self.detectors if callable(getattr(d, "enrich", None))]
        self._tickers = [d for d in self.detectors if callable(getattr(d, "tick", None))]
        self._pacers = [d for d in self.detectors if callable(getattr(d, "behind", None))]
        self._wholes = [d for d in self.detectors if callable(getattr(d, "whole", None))]
        self._next_tick = 0.0
        # Alert changes go here once stored (``fleetwatch.pipeline.sinks.Notifier.send``);
        # a ``notifier`` also adopts and forgets open alerts as partitions move.
        self._notify = notify
        self._notifier = notifier
        self.stats = Stats()
        # Events, alert changes and ledger rows the store refuses for good: counted, said.
        self.refusals = Refusals(self.stats.records_refused, getattr(store, "database", None))
        self._decoder = Decoder()
        self._clock = clock
        self.clocks = ClockWatch(max_clock_ahead_s)  # agents' clocks against ours
        # Nodes whose clocks are off (``node_clock_skew``): judged with the next batch
        # detected, as the frames of a node whose frames are refused reach no detector.
        self._clock_findings: list[Finding] = []
        self._heard: list[tuple[str, str, str, float]] = []  # nodes refused, heard of
        self._keyless = KeylessLog()  # keyless frames of other members' nodes refused here
        # Frames the store refused for good (id -> frame, kept alive so that the id stays
        # its own) until their batch is evaluated without them.
        self._refused_frames: dict[int, Frame] = {}
        self._warned: set[tuple[str, str, str]] = set()  # (cluster, node, metric) said
        self._dead = DeadLetters(dead_letters, dead_letter_topic, dead_letter_give_up_s)
        # A burst of bad messages: the first of each field logged, the rest counted.
        self._dead_log = DeadLetterLog(dead_letter_log_every_s, logger=log, topic=(
            dead_letter_topic if dead_letters is not None else None))
        drops = [self.events.drop, self.node_states.drop,
                 *([self.energy.drop] if self.energy is not None else []),
                 *(d.drop for d in self.detectors if callable(getattr(d, "drop", None)))]
        # Per-node state dropped for nodes forgotten for good (``retire``): not the alerts.
        self._state_drops = list(drops)
        if callable(getattr(store, "retire", None)):  # the store's cached ids of them
            self._state_drops.append(store.retire)  # type: ignore[attr-defined]
        self._retirers = [d for d in self.detectors if callable(getattr(d, "retired", None))]
        if notifier is not None:
            drops.append(notifier.forget)
        expects = [d.expect for d in self.detectors if callable(getattr(d, "expect", None))]
        self._expects = expects
        # Open alerts loaded from the store go to the notifier and to every detector with
        # an ``adopt`` (the XID detector carries on an open XID alert after a restart).
        adopts = [d.adopt for d in self.detectors if callable(getattr(d, "adopt", None))]
        if notifier is not None:
            adopts.append(notifier.adopt)
        # A notifier lets go of the rack alerts whose rack another member judges now.
        let_go = getattr(notifier, "let_go", None)
        self.ownership = Ownership(store, self.alerts, [*on_revoked, *drops], adopts, expects,
                                   clock, [let_go] if callable(let_go) else [])
        # With several members, each rack is judged by one (``pipeline.rack_judges``).
        self.racks = RackJudges(store, self.ownership, self.detectors, clock,
                                clusters=clusters)
        self.ownership.judges = self.racks.judges
        self.ownership.named = self.racks.clusters
        self._stop = threading.Event()  # the run's, for waits outside the loop
        self.drained = (0, 0)  # on stop: batches finished, batches left to replay

    # -- one batch, no bus (decoding, clocks and dead letters: pipeline.intake) --
    def handle(self, messages: Sequence[Message]) -> list[Frame]:
        """One batch: decode, store, detect, alert. Raises StoreError if the store is away."""
        frames, sources = self.decode(messages)
        self._send_dead_letters()
        if frames or self._clock_findings:  # a node whose frames are all refused: alerted
            t0 = time.perf_counter()
            points = self._write(frames, sources) if frames else 0
            self._send_dead_letters()  # the store's refusals, before the batch counts as done
            self._evaluate(Batch(list(messages), frames, sources), points, t0)
        return frames

    def process(self, frames: Sequence[Frame]) -> None:
        """Store and evaluate frames that come from no bus (a replay, a simulation)."""
        if not frames:
            return
        t0 = time.perf_counter()
        self._enrich(frames)
        batch = Batch([], list(frames), None)
        self._evaluate(batch, self.store.write(frames), t0)

    def _enrich(self, frames: Sequence[Frame]) -> None:
        """Derived metrics (a detector's ``enrich``: the thermal health score) join the
        frames before they are stored, so that they are series like any other."""
        for d in self._enrichers:
            try:
                d.enrich(frames)
            except Exception:  # a model's bug must not stop storing
                self.stats.errors += 1
                log.exception("%s could not score a batch of %d frames",
                              getattr(d, "name", type(d).__name__), len(frames))

    def _write(self, frames: list[Frame], sources: Sequence[Message] | None,
               failed: BaseException | None = None) -> int:
        """Store ``frames``; what the store refuses for good becomes dead letters.

        ``failed``: the error of a first try (from a writer thread), handled as
        if this call had raised it. Raises ``StoreError`` while the store is away.
        """
        try:
            if failed is not None:
                raise failed
            return self.store.write(frames)
        except StoreRejected as exc:
            return self._bisect(frames, sources, exc, surprise=False)

    def _bisect(self, frames: list[Frame], sources: Sequence[Message] | None,
                exc: BaseException, surprise: bool) -> int:
        """Store what the store takes of ``frames``; dead-letter the rest (``bisect``)."""
        return bisect(self.store.write, frames, sources, exc, self._refused,
                      surprise=surprise)

    def _refused(self, frame: Frame, source: Message | None, reason: str,
                 about_frame: bool = True) -> None:
        """A frame the store refused for good: dead-lettered; left out of the detectors
        and the ledger only when the frame itself is at fault (``about_frame``)."""
        self.stats.store_rejected += 1
        if about_frame:
            self._refused_frames[id(frame)] = frame
        else:
            reason = f"{reason}{self.refusals.advice(reason)}; still judged for alerts"
        if source is not None:
            # The store's reason is the batch's (it may name another frame of it): each
            # dead letter names its own.
            self._dead_letter(source, f"{frame.cluster}/{frame.rack}/{frame.node} at "
                                      f"{_iso(frame.ts)}: {reason}", "store")
        else:
            log.error("frame of %s/%s at %s refused by the store, not stored: %s",
                      frame.cluster, frame.node, frame.ts, reason)

    def _without_refused(self, batch: Batch) -> None:
        """The batch less the frames the store refused: not stored, so neither energy nor
        any detector's state may move on them (a frame VictoriaMetrics refuses as too far
        ahead would otherwise be the ledger's newest sample until then)."""
        refused, self._refused_frames = self._refused_frames, {}
        if not refused or not batch.frames:
            return
        keep = [id(f) not in refused for f in batch.frames]
        batch.frames = [f for f, k in zip(batch.frames, keep, strict=True) if k]
        if batch.sources is not None:
            batch.sources = [m for m, k in zip(batch.sources, keep, strict=True) if k]
        # Judged while the store was away (``judge``): energy at least leaves them out.
        batch.owned = [f for f in batch.owned if id(f) not in refused]

    def _tell_behind(self, nodes: dict[tuple[str, str], tuple[str, int]]) -> None:
        """Tell the detectors that judge against "now" which nodes' partitions still hold
        messages not polled yet (catching up a backlog: see ``NodeSilence``), and whether
        this processor reads every partition (then it judges every rack: ``whole``; else
        only its own, ``pipeline.rack_judges``)."""
        every = self.ownership.whole()
        for d in self._wholes:
            d.whole(every)  # type: ignore[attr-defined]
        self.racks.feed()  # with several members: the racks this one judges, from the store
        for d in self._pacers:
            try:
                d.behind(nodes)  # type: ignore[attr-defined]
            except Exception:  # a detector's bug must not stop the loop
                self.stats.errors += 1
                log.exception("detector %s could not be told which partitions are behind",
                              getattr(d, "name", type(d).__name__))

    def _findings(self, frames: Sequence[Frame], wall: float | None) -> list[Finding]:
        findings: list[Finding] = []
        for d in self.detectors:
            try:
                # A detector that judges against "now" (silent nodes) is bounded by this
                # processor's clock when the frames come live from a bus.
                findings.extend(d.update(frames, wall=wall)  # type: ignore[call-arg]
                                if getattr(d, "uses_wall", False) else d.update(frames))
            except Exception:  # a detector's bug must not stop storing
                self.stats.errors += 1
                log.exception("detector %s failed on a batch of %d frames; skipped for it",
                              getattr(d, "name", type(d).__name__), len(frames))
        return findings

    def _detect(self, batch: Batch, judging: bool = False) -> None:
        """The batch's findings and events, once (kept for a retry). Raises ``StoreError``
        while the store is away and boards must be recalled from it, unless ``judging``
        (the store is known away: judged without them, compared once it is back)."""
        if batch.findings is not None:
            return
        self._without_refused(batch)
        frames = self.ownership.owned_frames(batch.frames or [], batch.sources,
                                             batch.generation)
        self.ownership.build(frames, batch.sources if frames is batch.frames else None)
        self._recall_boards(frames, judging)
        batch.owned = frames
        batch.events = self.events.update(frames) if frames else []
        wall = self._clock() if batch.messages else None  # none in a replay
        if frames:
            self._tell_behind(self.ownership.behind(batch.behind))
        if self._heard:
            # A node whose frames are all refused (its clock far ahead, its frames under
            # another key) was heard of all the same: known to the silence detector, which
            # pages it once it stops.
            heard, self._heard = self._heard, []
            for expect in self._expects:
                expect(heard)
        batch.findings = self._findings(frames, wall) if frames else []
        batch.findings += self._clock_findings
        self._clock_findings = []

    def _evaluate(self, batch: Batch, points: int, t0: float) -> None:
        """Detect and drive alerts on a stored batch (unless judged while the store was
        away: then only what it left unwritten is written); count it.

        Raises ``StoreError`` when the alert changes cannot be stored: they are applied
        and sent all the same (alerts do not wait for the store), kept to be written on
        the retry, and the batch is not judged again.
        """
        self._without_refused(batch)
        self._detect(batch)
        if batch.judged:  # judged while the store was away: its alerts' record now
            self._store_alerts(batch, [])
            self._recall_late()
        else:
            changes = self.alerts.observe(batch.owned, batch.findings) \
                if batch.owned or batch.findings else []
            # Once per batch (not judged again on a retry): written with its events, and
            # with those of a ``tick`` the store was away for.
            batch.events = [*self._unstored_events, *(batch.events or ()),
                            *self.node_states.update(batch.owned or (), changes, (
                                self._clock() if batch.messages else None))]
            self._unstored_events = []
            self._store_alerts(batch, changes)
            self._deliver(batch, changes)
            self.retire()
        if batch.events:  # with the batch, before its commit; written again on a retry
            self.refusals.write("events", self.store.write_events, batch.events)
        if self.energy is not None and batch.owned:  # idempotent: a retry adds nothing
            self.energy.observe(batch.owned, refused=self._ledger_refused)
        self.stats.frames += len(batch.frames or ())
        self.stats.points += points
        for e in batch.events or ():  # here, once per batch: a retry comes back above
            self.stats.events[e.kind] = self.stats.events.get(e.kind, 0) + 1
        if batch.frames:
            self.stats.last_batch_s = time.perf_counter() - t0

    def retire(self) -> None:
        """Drop every per-node state of the nodes the detectors forgot for good (no frame
        for ``node_silence.FORGET_S``: their ``node_silent`` alert resolved as forgotten),
        so that memory follows the live fleet, not every node name ever seen."""
        names: set[str] = set()
        for d in self._retirers:
            names |= d.retired()
        if not names:
            return
        self.ownership.retire(names)
        for drop in self._state_drops:
            try:
                drop(names)
            except Exception:  # a detector's bug must not stop the loop
                self.stats.errors += 1
                log.exception("the state of %d forgotten nodes could not be dropped", len(names))

    def _ledger_refused(self, rows: int, reason: str) -> None:
        """Energy ledger rows the store refused for good: the ledger goes on without them."""
        self.refusals.said("energy ledger rows", partial_dropped(reason) or rows, reason)


def _iso(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{ts:.0f} (epoch seconds)"
