"""The Kafka bus's consumer (``pipeline.bus.kafka``): one member of a consumer group,
through kafka-python, with manual commits.

``commit`` stores exactly what ``poll`` returned, only for partitions this member still
owns, and lag comes from the fetch responses' high watermark (``end_offsets`` is wrong
on Tansu for batched writes), and while paused (nothing fetched) from listed end offsets
every 2 s. ``listen`` hands assignments and revocations to the processor
(``Rebalance``), from inside ``poll``. Tombstones (null values) come through as
``Message.value`` None.
"""

from __future__ import annotations

import logging
import math
import struct
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import kafka
import kafka.errors as kerr
from kafka import ConsumerRebalanceListener, TopicPartition
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.partitioner.default import murmur2
from kafka.structs import OffsetAndMetadata

from fleetwatch.pipeline.bus import (
    BusBroken,
    BusError,
    BusRebalancing,
    Message,
    Partition,
    Rebalance,
)
from fleetwatch.pipeline.bus.kafka_access import cannot_reach, check_listener, refused_options
from fleetwatch.pipeline.bus.kafka_assignor import OnGroup, SettingsRange
from fleetwatch.pipeline.bus.kafka_batches import Undecodable, undecodable
from fleetwatch.pipeline.bus.kafka_remade import Remade
from fleetwatch.pipeline.bus.kafka_settled import settled

# The bus's logger, as before the consumer had a module of its own.
log = logging.getLogger("fleetwatch.pipeline.bus.kafka")


# How often a consumer asks for the topic's metadata when nothing else made it ask: how
# late, at the latest, it sees a topic made again or with other partitions (kafka-python's
# default, 5 minutes, let a group read a re-made topic's old partitions that long).
_METADATA_MAX_AGE_MS = 30_000

# How often a paused consumer lists its partitions' end offsets (for the lag).
_LIST_EVERY_S = 2.0

# Beyond the longest a healthy member waits between two answers of the brokers (a fetch
# response, due every fetch_max_wait_ms, or a heartbeat's), how long before its polls
# that bring nothing stop meaning that nothing was sent (``listening``).
_ANSWER_SLACK_S = 1.0


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Keeps the consumer's view of its partitions current across rebalances."""

    def __init__(self, owner: KafkaConsumer) -> None:
        self._owner = owner

    def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        self._owner._revoked(revoked)

    def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self._owner._assigned(assigned)


class KafkaConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str, *,
                 security: dict[str, Any] | None = None, session_timeout_ms: int = 10_000,
                 heartbeat_interval_ms: int = 3000, max_poll_records: int = 2000,
                 client_id: str = "fleetwatch", auto_offset_reset: str = "earliest",
                 max_poll_interval_ms: int = 300_000, bootstrap_timeout_ms: int = 30_000,
                 commit_timeout_s: float = 30.0, options: Mapping[str, Any] | None = None,
                 member_data: bytes = b"", on_group: OnGroup | None = None,
                 **extra: Any) -> None:
        """``options``: the user's kafka-python options (``bus.kafka_consumer``, checked at
        load), over the values above. ``member_data`` and ``on_group``: this member's
        settings fingerprint, handed to the group, and what to call with the group's
        (``kafka_assignor``; not with a user's own ``partition_assignment_strategy``)."""
        self._topic = topic
        self._commit_timeout_ms = int(commit_timeout_s * 1000)
        self._lock = threading.Lock()
        # Next offset to commit per partition: one past the last message poll returned.
        self._returned: dict[TopicPartition, int] = {}
        self._paused = False
        self._lag: int | None = None
        # Partitions with messages not returned yet, as of the last poll (``behind``).
        self._behind: frozenset[tuple[str, int]] = frozenset()
        settings = dict(
            bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
            enable_auto_commit=False, auto_offset_reset=auto_offset_reset,
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_records=max_poll_records, max_poll_interval_ms=max_poll_interval_ms,
            bootstrap_timeout_ms=bootstrap_timeout_ms, metadata_max_age_ms=_METADATA_MAX_AGE_MS,
            **(security or {}), **extra)
        if member_data or on_group is not None:
            settings["partition_assignment_strategy"] = (
                SettingsRange(member_data, on_group), RoundRobinPartitionAssignor)
        settings.update(options or {})
        self._max_poll_records = settings["max_poll_records"]
        self._listener: Rebalance | None = None
        # Paused partitions are not fetched, so their high watermark goes stale:
        # while paused, the end offsets are listed every few seconds instead.
        self._listed: dict[TopicPartition, int] = {}
        self._listed_at = 0.0
        # Offsets of batches passed over because they could not be decoded.
        self.passed_over = 0
        # When the poll in progress began (None: none is); see ``lag``.
        self._polling_since: float | None = None
        self.stale_after_s = 60.0
        # When the brokers last answered this member (``unheard_s``), on ``_clock``.
        self._clock = time.monotonic
        self._answered = -math.inf
        self.answer_window_s = _ANSWER_SLACK_S + max(
            2 * settings.get("fetch_max_wait_ms", 500), settings["heartbeat_interval_ms"]) / 1000
        check_listener(bootstrap, security)
        since = time.monotonic()
        try:
            self._consumer = kafka.KafkaConsumer(**settings)
        except (kerr.KafkaConfigurationError, ValueError) as exc:
            raise BusError(refused_options("consumer", exc)) from exc
        except kerr.KafkaError as exc:
            raise BusError(cannot_reach(bootstrap, exc, since)) from exc
        self._consumer.subscribe([topic], listener=_Rebalance(self))
        self._remade = Remade(self._consumer, topic, self._forget)
        self._watch_answers()

    def _watch_answers(self) -> None:
        """Note when a fetch response comes (kafka-python's fetcher reads its callback
        when it sends each request). Another kafka-python: not noted (``unheard_s``)."""
        fetcher = getattr(self._consumer, "_fetcher", None)
        handle = getattr(fetcher, "_handle_fetch_response", None)
        if not callable(handle):
            return

        def answered(*args: Any, **kwargs: Any) -> Any:
            self._answered = self._clock()
            return handle(*args, **kwargs)

        fetcher._handle_fetch_response = answered

    def _revoked(self, revoked: Sequence[TopicPartition]) -> None:
        # Their next owner starts from the last commit; committing what this
        # member read but did not commit would skip messages nobody stored.
        with self._lock:
            for tp in revoked:
                self._returned.pop(tp, None)
                self._listed.pop(tp, None)
        if self._listener is not None:
            self._listener.revoked([(tp.topic, tp.partition) for tp in revoked])

    def _assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self._remade.assigned(assigned)
        if self._paused and assigned:
            self._consumer.pause(*assigned)
        if self._listener is not None:
            self._listener.assigned([(tp.topic, tp.partition) for tp in assigned])

    def listen(self, listener: Rebalance) -> None:
        # kafka-python calls the rebalance listener from inside poll(): so is ours.
        self._listener = listener

    def partitions(self) -> frozenset[Partition]:
        """Every partition of the subscribed topic, as last known (empty: not known yet)."""
        found = self._consumer.partitions_for_topic(self._topic)
        return frozenset((self._topic, p) for p in found or ())

    def partition_of(self, key: bytes) -> Partition | None:
        # As kafka-python's DefaultPartitioner (and the Java client's) places a keyed
        # message: murmur2 of the key over the topic's partitions, in order.
        partitions = self._consumer.partitions_for_topic(self._topic)
        if not partitions:
            return None
        ordered = sorted(partitions)
        return (self._topic, ordered[(murmur2(key) & 0x7FFFFFFF) % len(ordered)])

    def poll(self, max_messages: int = 500, timeout_s: float = 1.0) -> list[Message]:
        self._polling_since = time.monotonic()
        try:
            batches = self._consumer.poll(timeout_ms=int(timeout_s * 1000),
                                          max_records=min(max_messages, self._max_poll_records))
        except Exception as exc:
            # A batch the client cannot decode (a codec it lacks, a corrupt batch) is not
            # an outage: pausing and polling again would spin on it forever.
            bad = undecodable(exc)
            if bad is not None:
                self._pass_over(bad)
                return []
            if isinstance(exc, kerr.KafkaError):
                raise BusError(f"cannot poll {self._topic!r}: {exc}") from exc
            if isinstance(exc, struct.error):
                raise BusBroken(
                    f"kafka-python cannot encode its fetch request for {self._topic!r} "
                    f"(struct.error: {exc}): an integer option of [bus.kafka_consumer] is "
                    "outside the Kafka protocol's 32-bit range; correct it and start the "
                    "processor again") from exc
            raise
        finally:
            self._polling_since = None
        if self._remade.topic_made_again():
            return []  # read at positions of the old log: all is read again from the start
        out: list[Message] = []
        owned = self._consumer.assignment()
        with self._lock:
            for tp, records in batches.items():
                if not records or tp not in owned:
                    continue
                out.extend(Message(r.value, r.key, tp.topic, tp.partition, r.offset,
                                   tuple(r.headers or ())) for r in records)
                self._returned[tp] = records[-1].offset + 1
        self._lag = self._measure_lag()
        return out

    def _pass_over(self, bad: Undecodable) -> None:
        """Seek past a batch no message of which can be decoded, and say so."""
        if bad.tp not in self._consumer.assignment():
            return  # revoked meanwhile: its next owner meets the batch and says so
        self._consumer.seek(bad.tp, bad.next_offset)
        with self._lock:
            self._returned[bad.tp] = max(self._returned.get(bad.tp, 0), bad.next_offset)
        self.passed_over += bad.next_offset - bad.first
        hint = ""
        if "UnsupportedCodec" in bad.reason:
            hint = (" Install the codec's library where the processor runs (zstandard for"
                    " zstd, python-snappy for snappy, lz4) or have that producer use another"
                    " compression.")
        log.error("topic %r partition %d: passed over offsets %d to %d, a record batch that "
                  "cannot be decoded (%s); another producer wrote it, and its messages are "
                  "neither stored nor dead-lettered.%s", bad.tp.topic, bad.tp.partition,
                  bad.first, bad.next_offset - 1, bad.reason, hint)
        self._lag = self._measure_lag()

    def commit(self, messages: Sequence[Message] | None = None) -> None:
        owned = self._consumer.assignment()
        if messages is not None:
            upto: dict[TopicPartition, int] = {}
            for m in messages:
                tp = TopicPartition(m.topic, m.partition)
                upto[tp] = max(upto.get(tp, 0), m.offset + 1)
        else:
            with self._lock:
                upto = dict(self._returned)
        # Only what was returned since the partition was assigned or read again from its
        # start: a batch in hand from before a reset holds offsets of the old log.
        with self._lock:
            returned = dict(self._returned)
        upto = {tp: min(off, returned[tp]) for tp, off in upto.items() if tp in returned}
        offsets = {tp: OffsetAndMetadata(off, "", -1) for tp, off in upto.items() if tp in owned}
        if not offsets:
            return
        try:
            # Bounded: without a timeout kafka-python waits for a coordinator forever.
            self._consumer.commit(offsets=offsets, timeout_ms=self._commit_timeout_ms)
        except kerr.CommitFailedError as exc:
            # The group rebalanced under us: the partitions' new owners replay
            # from the previous commit, and the store's idempotent writes make
            # that harmless. Not an outage, so not a BusError.
            log.warning("commit rejected after a rebalance, messages will be replayed: %s", exc)
        except kerr.RebalanceInProgressError as exc:
            # A member joined or left and the group is being rebalanced: commit after it.
            raise BusRebalancing(f"the consumer group is rebalancing; offsets of "
                                 f"{self._topic!r} not committed yet: {exc}") from exc
        except kerr.KafkaError as exc:
            raise BusError(f"cannot commit offsets of {self._topic!r}: {exc}") from exc

    def pause(self) -> None:
        self._paused = True
        self._listed_at = 0.0  # list the end offsets on the next poll
        self._consumer.pause(*self._consumer.assignment())

    def resume(self) -> None:
        self._paused = False
        self._consumer.resume(*self._consumer.assignment())

    def lag(self) -> int | None:
        # Computed by poll and cached: lag() is read by the /metrics thread, and
        # kafka-python's consumer must only be driven from the polling thread. A poll
        # that has not returned for long (kafka-python stuck inside it) left the figure
        # behind the broker: unknown, not a healthy-looking old number.
        since = self._polling_since
        if since is not None and time.monotonic() - since > self.stale_after_s:
            return None
        return self._lag

    def _list_end_offsets(self, owned: set[TopicPartition]) -> None:
        """While paused, the partitions' end offsets from the broker, every few seconds.

        A paused partition is not fetched, so its high watermark (which comes
        with fetch responses) stays where it was when the store went away and
        the lag read 0 for the whole outage. Listing offsets is one request;
        on Tansu it names the last batch's first offset (one batch short), so
        the high watermark is used whenever it is higher.
        """
        now = time.monotonic()
        if not owned or now - self._listed_at < _LIST_EVERY_S:
            return
        self._listed_at = now
        try:
            listed = self._consumer.end_offsets(list(owned))
        except (kerr.KafkaError, ValueError) as exc:
            log.debug("cannot list end offsets for the lag: %s", exc)
            return
        with self._lock:
            self._listed = {tp: off for tp, off in listed.items() if off is not None}

    def behind(self) -> frozenset[Partition]:
        """The partitions of this member that held messages not returned yet, as of the
        last poll (its fetch responses' high watermark; one not fetched yet counts): a
        processor catching up a backlog reads them unevenly, and the silent-node rule
        must not judge their nodes on the time of the partitions read further."""
        return self._behind

    def _measure_lag(self) -> int | None:
        total, known = 0, False
        behind: set[Partition] = set()
        lost: list[tuple[TopicPartition, int, int]] = []
        owned = self._consumer.assignment()
        if self._paused:
            self._list_end_offsets(owned)
        for tp in owned:
            try:
                high = self._consumer.highwater(tp)
                if self._paused:
                    listed = self._listed.get(tp)
                    if listed is not None and (high is None or listed > high):
                        high = listed
                with self._lock:
                    pos = self._returned.get(tp)
                if pos is None and high is not None:
                    pos = self._consumer.position(tp, timeout_ms=0)
            except kerr.KafkaError:
                continue  # revoked meanwhile, or no position yet
            if high is None or pos is None or high > pos:
                # Not fetched yet (just assigned): not known to be read to its end.
                behind.add((tp.topic, tp.partition))
            if high is None or pos is None:
                continue
            if high < pos:  # the broker's log ends below this member's position
                lost.append((tp, pos, high))
                behind.add((tp.topic, tp.partition))
                continue
            total += max(0, high - pos)
            known = True
        self._behind = frozenset(behind)
        for tp, pos, high in lost:
            self._remade.log_ended(tp, pos, high)
        # No partition: nothing waits for this member (a spare one, or between assignments).
        return total if known or not owned else None

    def _forget(self, parts: Collection[TopicPartition]) -> None:
        """Drop what this member returned of ``parts``: their log was made again (never
        commit the old position on the new log)."""
        with self._lock:
            for tp in parts:
                self._returned.pop(tp, None)
                self._listed.pop(tp, None)

    @property
    def offsets_reset(self) -> int:
        """Partitions read again from their log's start because the broker lost or made
        again their log (``kafka_remade``)."""
        return self._remade.count

    def settled(self, partitions: Collection[Partition]) -> frozenset[Partition] | None:
        """Of ``partitions`` (other members'), those the group has stored to their end
        (``kafka_settled``; None: the brokers did not say)."""
        return settled(self._consumer, partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self._consumer.assignment())

    def unheard_s(self) -> float:
        """How long since the brokers last answered this member: a fetch response or a
        heartbeat's (0: not known, another kafka-python).

        kafka-python keeps a connection, and its group coordinator, until a request on it
        fails: a broker that hangs or is cut off (no reset comes) looks connected for as
        long as a request's timeout, and one that shuts down cleanly serves meanwhile.
        Only an answer says that the polls that brought nothing meant nothing was sent."""
        try:
            heartbeat = self._consumer._coordinator.heartbeat.last_receive
        except AttributeError:
            return 0.0
        return max(0.0, self._clock() - max(self._answered, heartbeat))

    def listening(self) -> bool:
        """Is this member in its group with its coordinator reachable, and have the brokers
        answered it lately (``unheard_s``), so that a poll that brings nothing means
        nothing was sent? (Not while the brokers are away, hang or are cut off, or the
        group rebalances: the silent-node rule must not count that time.)"""
        try:
            coordinator = self._consumer._coordinator
            node = coordinator.coordinator()
            if node is None or not self._consumer._client.connected(node) \
                    or not coordinator.stable():
                return False
        except AttributeError:  # another kafka-python: its polls are taken at their word
            return True
        return self.unheard_s() <= self.answer_window_s

    def close(self) -> None:
        try:
            self._consumer.close(autocommit=False)
        except kerr.KafkaError:
            log.debug("kafka consumer did not close cleanly", exc_info=True)
