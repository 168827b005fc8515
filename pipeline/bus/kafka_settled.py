"""Which of a topic's partitions its consumer group has read and stored to their end: the
group's committed offset of each reaches the partition's end offset.

A member commits a batch only once it is stored (``pipeline.consume_loop``), so a partition
settled here holds nothing its owner has not written to the store: the shared store's last
frame of each of its nodes is that node's last frame. The rack judge of another member's
nodes (``pipeline.rack_judges``) judges those on its own time then, not on the newest frame
it has read of them (which stops when they all stop: a small fleet). A partition whose
owner lags (a backlog, a store away) is not settled: its nodes' last frames may be on their
way. Asked from the polling thread (kafka-python's consumer is not thread-safe).

On Tansu the listed end offset is the last batch's first offset (one producer batch short,
see ``kafka_consumer``): a partition may read settled with its one newest batch unread,
which holds frames a few seconds old at most, far from half a node's silence limit.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import kafka
import kafka.errors as kerr
from kafka import TopicPartition

from fleetwatch.pipeline.bus import Partition

log = logging.getLogger("fleetwatch.pipeline.bus.kafka")

TIMEOUT_MS = 500  # each of the two requests: the processor's loop waits meanwhile


def settled(consumer: kafka.KafkaConsumer,
            partitions: Collection[Partition]) -> frozenset[Partition] | None:
    """Of ``partitions``, those whose group's committed offset reaches their end (not one
    where no offset was ever committed; None: the brokers did not say)."""
    tps = [TopicPartition(t, p) for t, p in sorted(partitions)]
    if not tps:
        return frozenset()
    try:
        # Not while the group is between assignments (a broker back empty, a topic made
        # again with another partition count, a member come or gone): asked then, the
        # coordinator's requests held the member from rejoining its group for minutes.
        coordinator = consumer._coordinator
        if coordinator.coordinator_unknown() or coordinator.need_rejoin():
            return None
        known = consumer.partitions_for_topic(tps[0].topic) or set()
        if any(tp.partition not in known for tp in tps):
            return None
        # The commits first: a frame committed before the end was listed is stored.
        committed = consumer._coordinator.fetch_committed_offsets(tps, timeout_ms=TIMEOUT_MS)
        ends = consumer.end_offsets(tps, timeout_ms=TIMEOUT_MS)
    except (kerr.KafkaError, AttributeError, TypeError, ValueError) as exc:
        log.debug("cannot read the group's committed offsets: %s", exc)
        return None
    out = set()
    for tp in tps:
        done, end = committed.get(tp), ends.get(tp)
        offset = getattr(done, "offset", None)
        if offset is not None and offset >= 0 and end is not None and offset >= end:
            out.add((tp.topic, tp.partition))
    return frozenset(out)
