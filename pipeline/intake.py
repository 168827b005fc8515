"""What comes into the processor, before anything is stored: messages decoded into
frames (impossible readings left out and counted), frames whose message key is not their
node's name set aside (``pipeline.frame_key``), frames too far ahead of the processor's
clock set aside (``pipeline.clock_skew``), and what cannot be used queued as dead letters
(``pipeline.dead_letters``) and said once a minute. A mixin of ``Processor``, whose
constructor sets the state it reads."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Sequence

from fleetwatch.codec import Decoder, FrameError
from fleetwatch.frame import Frame
from fleetwatch.frame_checks import field_shape
from fleetwatch.models import Finding
from fleetwatch.pipeline.batches import Stats
from fleetwatch.pipeline.bus import Message, Partition
from fleetwatch.pipeline.clock_skew import ClockWatch, gone_findings, skew_findings
from fleetwatch.pipeline.dead_letters import DeadLetterLog, DeadLetters
from fleetwatch.pipeline.frame_key import KeylessLog, home, misplaced, owns
from fleetwatch.pipeline.ownership import Locate, Ownership

log = logging.getLogger("fleetwatch.pipeline.processor")  # as before the move: said there

# Distinct unknown metric ids counted (and said) each on its own; more are "other".
UNKNOWN_KEYS = 32


class Intake:
    """Decoding, clock bounds and dead letters of ``Processor``."""

    stats: Stats
    clocks: ClockWatch
    _decoder: Decoder
    _clock: Callable[[], float]
    _dead: DeadLetters
    _dead_log: DeadLetterLog
    _warned: set[tuple[str, str, str]]  # (cluster, node, metric) said
    _clock_findings: list[Finding]  # node_clock_skew, judged with the next batch
    # Nodes of this member whose frames were refused (for their clock, for their key):
    # (cluster, rack, node, the stream's time they arrived), told to the detectors'
    # ``expect`` with the next batch, so that a node arriving is not paged silent.
    _heard: list[tuple[str, str, str, float]]
    _keyless: KeylessLog  # the warning, per node, that its keyless frames are refused here
    _stop: threading.Event
    ownership: Ownership  # its ``locate``: the partition a node's name maps to

    def _enrich(self, frames: Sequence[Frame]) -> None:
        raise NotImplementedError

    def decode(self, messages: Sequence[Message]) -> tuple[list[Frame], Sequence[Message]]:
        """Good frames out, each with its message; bad ones queued as dead letters."""
        frames: list[Frame] = []
        decode = self._decoder.decode
        locate = self.ownership.locate
        owned = self.ownership.owned
        bad: list[int] = []
        for i, m in enumerate(messages):
            try:
                f = decode(m.value)
            except Exception as exc:  # noqa: BLE001 - FrameError; anything else is bad input too
                # The label is the field's shape (gpus.metrics), never the sender's key:
                # the detail is in the reason, logged and in the dead letter's header.
                field = field_shape(exc.field) if isinstance(exc, FrameError) else "frame"
                self._dead_letter(m, str(exc), field)
                bad.append(i)
                continue
            if m.key != f.node.encode() and (wrong := misplaced(m, f, locate, owned)):
                self._dead_letter(m, wrong, "key")
                self._refused_for_key(m, f, locate, owned)
                bad.append(i)
                continue
            frames.append(f)
            if self._decoder.dropped:
                self._dropped_readings(frames[-1], m)
            if self._decoder.unknown:
                self._unknown_metrics(frames[-1], m)
        skip = set(bad)
        good = [m for i, m in enumerate(messages) if i not in skip] if bad else messages
        frames, good = self._check_clocks(frames, good)
        self._enrich(frames)
        return frames, good

    def _check_clocks(self, frames: list[Frame], sources: Sequence[Message]
                      ) -> tuple[list[Frame], Sequence[Message]]:
        """Frames too far ahead of this processor's clock become dead letters; nodes whose
        clocks are off are said once each (``pipeline.clock_skew``)."""
        if not frames:
            return frames, sources
        wall = self._clock()
        verdict = self.clocks.check(frames, wall)
        now = self.clocks.now(wall)
        self._clock_findings += skew_findings(verdict.skewed, now) + gone_findings(
            verdict.gone, now)
        self._heard += verdict.heard
        self.stats.clock_ahead += verdict.ahead
        self.stats.clock_behind += verdict.behind
        for level, line in verdict.lines:
            log.log(level, "%s", line)
        if not any(verdict.reasons):
            return frames, sources
        kept: list[Frame] = []
        kept_sources: list[Message] = []
        for f, m, reason in zip(frames, sources, verdict.reasons, strict=True):
            if reason:
                self._dead_letter(m, reason, "clock")
            else:
                kept.append(f)
                kept_sources.append(m)
        return kept, kept_sources

    def _refused_for_key(self, m: Message, f: Frame, locate: Locate | None,
                         owned: Collection[Partition] | None) -> None:
        """A node of this member's is heard of all the same (it is arriving: not paged
        silent while it does); one of another member's is not judged here (its owner pages
        it), and its keyless frames refused here are said per node (``KeylessLog``)."""
        at = home(f, locate)
        if locate is None or owns(at, owned):
            self._heard.append((f.cluster, f.rack, f.node, self.clocks.now(self._clock())))
        elif m.key is None:
            self._keyless.refused(m, f, at)

    def _dropped_readings(self, frame: Frame, m: Message) -> None:
        """Impossible readings the decoder left out of an otherwise good frame: counted by
        metric, and logged once per node and metric (a failing sensor says it every
        interval)."""
        for where, why in self._decoder.dropped:
            metric = where.rsplit(".", 1)[-1]
            dropped = self.stats.readings_dropped
            dropped[metric] = dropped.get(metric, 0) + 1
            said = (frame.cluster, frame.node, metric)
            if said in self._warned or len(self._warned) >= 100_000:
                continue
            self._warned.add(said)
            log.warning("%s/%s (%s/%d@%d): %s: %s: that reading is left out, the rest of the "
                        "frame stored (said once per node and metric; "
                        "fleetwatch_processor_readings_dropped counts them)",
                        frame.cluster, frame.node, m.topic, m.partition, m.offset, where, why)

    def _unknown_metrics(self, frame: Frame, m: Message) -> None:
        """Metrics of a later release left out of an otherwise good frame: counted by
        scope and id, and said once per id (a crafted frame's thousands of ids: at most
        ``UNKNOWN_KEYS`` series and lines, the rest counted as "other")."""
        counts = self.stats.unknown_metrics
        for scope, key in self._decoder.unknown:
            name = f"{scope}:{key}"
            if name not in counts and len(counts) >= UNKNOWN_KEYS:
                name = "other"
            n = counts.get(name, 0)
            counts[name] = n + 1
            if n:
                continue
            log.warning("%s/%s (%s/%d@%d): %s metric id %s is not in this processor's "
                        "catalogue: this processor is older than the agent: upgrade the "
                        "processors. That metric is left out, the rest of the frame stored "
                        "and judged (said once per id; "
                        "fleetwatch_processor_unknown_metrics_total counts them)",
                        frame.cluster, frame.node, m.topic, m.partition, m.offset, scope,
                        key if name != "other" else f"{key} (and more ids, counted as other)")

    def _dead_letter(self, m: Message, reason: str, kind: str) -> None:
        """``kind``: one of a fixed few (a field's shape, ``store``), the metric's label."""
        self.stats.dead_letters += 1
        self.stats.by_reason[kind] = self.stats.by_reason.get(kind, 0) + 1
        self._dead_log.add(kind, f"{m.topic}/{m.partition}@{m.offset}", reason)
        self._dead.add(m, reason)

    def _send_dead_letters(self) -> None:
        self._dead.send(self._stop)
        self.stats.dead_letters_lost = self._dead.lost
        self._dead_log.flush()

    def summarise_dead_letters(self, final: bool = False) -> None:
        """Log the dead letters counted and not yet said, per field, once their minute is
        over (all of them when ``final``: on stop)."""
        self._dead_log.flush(final)
