"""A log made again under a consumer (``pipeline.bus.kafka_consumer``): the broker came back
empty (a disk lost, Tansu's memory storage) or the topic was deleted and made again.

Its offsets count from the log's start again, and a consumer that fetches at the position
it held in the old log skips every message below it without a word: a broker need not
answer OFFSET_OUT_OF_RANGE (Tansu does not), and the lag, clamped at 0, hides it. Two
signs give it away:

* the partition's log ends below the consumer's position (the high watermark that fetch
  responses bring): seen at once, but only while the new log is shorter than the old;
* the topic's id (Kafka 2.8 and later, and Tansu, name each topic made with a new UUID in
  their metadata) is not the one the positions were taken in: seen at the next metadata
  refresh (kafka-python asks at once after a lost connection; ``metadata_max_age_ms`` at
  the latest), however far the new log has grown meanwhile (a spool replayed, agents kept
  sending while the processor was busy).

Either way the partition is read again from the log's start: what it holds now is new.
What this member read of it meanwhile from the old position comes again (the store's
writes are idempotent), and its offsets in the group are set back to the start, so that
the position committed on the new log before it was seen does not skip the same messages
in the member that reads the partition next.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection

import kafka
import kafka.errors as kerr
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

# The bus's logger, as before the consumer had a module of its own.
log = logging.getLogger("fleetwatch.pipeline.bus.kafka")

# How long the committed offsets of a topic made again may take to be set back.
_COMMIT_TIMEOUT_MS = 10_000


class TopicIdentity:
    """The id of one topic in the brokers' metadata, and when it changes."""

    def __init__(self, topic_id: Callable[[], object | None]) -> None:
        """``topic_id``: the topic's id as the client's metadata now has it (None: not
        known, a broker that does not name topics by id)."""
        self._topic_id = topic_id
        self._known: object | None = None

    def changed(self) -> tuple[object, object] | None:
        """(the id the positions were taken in, the new one) when the topic was made
        again since the last call; None otherwise."""
        try:
            now = self._topic_id()
        except (AttributeError, KeyError):  # another kafka-python: no ids
            return None
        if now is None:
            return None
        before, self._known = self._known, now
        if before is None or before == now:
            return None
        return before, now


def topic_id_of(consumer: kafka.KafkaConsumer, topic: str) -> Callable[[], object | None]:
    """Reads ``topic``'s id from a kafka-python consumer's metadata (kafka-python 3.0)."""
    return lambda: consumer._client.cluster.topic_id(topic)


def log_start(consumer: kafka.KafkaConsumer, tp: TopicPartition) -> int | None:
    """The partition's log start offset (None: the brokers did not say)."""
    try:
        return consumer.beginning_offsets([tp]).get(tp)
    except (kerr.KafkaError, ValueError):
        return None


def seek_start(consumer: kafka.KafkaConsumer, tp: TopicPartition) -> bool:
    """Seek ``tp`` to its log's start (false: it was revoked meanwhile)."""
    try:
        consumer.seek_to_beginning(tp)
    except (kerr.KafkaError, AssertionError, ValueError) as exc:
        log.debug("cannot seek %s to its start: %s", tp, exc)
        return False
    return True


def set_back(consumer: kafka.KafkaConsumer, parts: Collection[TopicPartition]) -> None:
    """Commit the log start of ``parts`` (the group's offsets on a log made again may be
    this member's old positions, committed before it saw). Best effort: a member that
    commits meanwhile commits what it read of the new log."""
    try:
        starts = consumer.beginning_offsets(list(parts))
        consumer.commit(offsets={tp: OffsetAndMetadata(off, "", -1)
                                 for tp, off in starts.items() if off is not None},
                        timeout_ms=_COMMIT_TIMEOUT_MS)
    except (kerr.KafkaError, ValueError, AssertionError) as exc:
        log.warning("cannot set the group's offsets of the re-made topic back to its start "
                    "(%s): a member that takes these partitions before this one commits "
                    "again may skip their first messages", exc)


class Remade:
    """Watches one consumer's topic for a log made again, and reads it from its start."""

    def __init__(self, consumer: kafka.KafkaConsumer, topic: str,
                 forget: Callable[[Collection[TopicPartition]], None]) -> None:
        """``forget``: drops what the owner returned of the partitions given (their old
        positions must never be committed on the new log)."""
        self._consumer, self._topic, self._forget = consumer, topic, forget
        self._identity = TopicIdentity(topic_id_of(consumer, topic))
        self.count = 0  # partitions read again from their start
        self._pending = False  # the topic was made again while this member owned none

    def _read_again(self, parts: Collection[TopicPartition]) -> list[TopicPartition]:
        reset = [tp for tp in parts if seek_start(self._consumer, tp)]
        self._forget(parts)
        self.count += len(reset)
        return reset

    def assigned(self, parts: Collection[TopicPartition]) -> None:
        """From the rebalance listener: partitions given after the topic was made again
        while this member owned none start at their log's start, not at offsets the group
        may hold from the old log."""
        if self._pending and parts:
            self._pending = False
            self._read_again([tp for tp in parts if tp.topic == self._topic])

    def topic_made_again(self) -> bool:
        """After each poll: is the topic another one than the positions were taken in?
        Then every partition of this member is read again from its start."""
        changed = self._identity.changed()
        if changed is None:
            return False
        owned = [tp for tp in self._consumer.assignment() if tp.topic == self._topic]
        # None owned (the group is being joined again, as after a broker's restart): the
        # partitions given next are read from their start.
        self._pending = not owned
        reset = self._read_again(owned)
        if reset:
            set_back(self._consumer, reset)
        log.warning(
            "topic %r was made again (its id was %s, now %s): the broker came back empty, or "
            "the topic was deleted and made again. Reading %s again from their start, so "
            "that nothing written to it is skipped at positions of the old one; messages "
            "the old one held and nobody read are gone. "
            "fleetwatch_processor_offsets_reset_total counts these.",
            self._topic, changed[0], changed[1],
            f"its {len(reset)} partitions of this processor" if owned
            else "the partitions this processor is given next")
        return True

    def log_ended(self, tp: TopicPartition, pos: int, high: int) -> None:
        """``tp``'s log ends (``high``, from fetch responses: no request) below the
        member's position ``pos``: read it again from its start. The log's start is asked
        for only here, to name it, and the topic's metadata at once (a topic made again may
        have other partitions, and its new id shows what else to read again)."""
        start = log_start(self._consumer, tp)
        if not seek_start(self._consumer, tp):
            return
        self._forget([tp])
        self.count += 1
        with contextlib.suppress(AttributeError):  # another kafka-python: when it will
            self._consumer._client.cluster.request_update()
        log.warning(
            "topic %r partition %d: the broker's log end (offset %d, log start %s) is below "
            "this processor's position %d: the broker lost or re-created the log (it came "
            "back empty, or the topic was deleted and made again). Reading it again from its "
            "start, so that nothing written since is skipped; messages it held before are "
            "gone from it (those this processor read were stored). "
            "fleetwatch_processor_offsets_reset_total counts these.",
            tp.topic, tp.partition, high, "unknown" if start is None else start, pos)
