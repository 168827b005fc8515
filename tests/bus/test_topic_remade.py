"""A topic made again under a consumer (pipeline/bus/kafka_remade.py): its new id in the
metadata makes the consumer read every partition it owns again from the log's start and set
the group's offsets back, or, owning none at that moment, those it is given next. Against a
real broker: tests/bus/test_broker_emptied.py."""

from __future__ import annotations

import logging
from collections.abc import Collection

import pytest
from kafka import TopicPartition

from fleetwatch.pipeline.bus.kafka_remade import Remade, TopicIdentity

TOPIC = "fleetwatch.frames"
OWNED = {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 3)}


class Cluster:
    def __init__(self) -> None:
        self.id: str | None = None
        self.updates = 0

    def topic_id(self, topic: str) -> str | None:
        return self.id

    def request_update(self) -> None:
        self.updates += 1


class Client:
    def __init__(self) -> None:
        self.cluster = Cluster()


class FakeConsumer:
    """kafka-python's consumer, as far as Remade uses it."""

    def __init__(self, owned: set[TopicPartition]) -> None:
        self._client = Client()
        self.owned = owned
        self.sought: list[TopicPartition] = []
        self.committed: dict[TopicPartition, int] = {}

    def assignment(self) -> set[TopicPartition]:
        return self.owned

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self.sought.extend(tps)

    def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, 0)

    def commit(self, offsets: dict[TopicPartition, object], timeout_ms: int) -> None:
        self.committed.update({tp: om.offset for tp, om in offsets.items()})  # type: ignore[attr-defined]


def remade(consumer: FakeConsumer) -> tuple[Remade, list[TopicPartition]]:
    forgotten: list[TopicPartition] = []

    def forget(parts: Collection[TopicPartition]) -> None:
        forgotten.extend(parts)

    return Remade(consumer, TOPIC, forget), forgotten  # type: ignore[arg-type]


def test_the_first_id_seen_and_the_same_id_again_are_not_a_topic_made_again() -> None:
    ids = iter([None, "a", "a", None, "a", "b", "b"])
    identity = TopicIdentity(lambda: next(ids))
    assert [identity.changed() for _ in range(7)] == [None] * 5 + [("a", "b"), None]


def test_a_new_topic_id_reads_every_owned_partition_from_its_start(
        caplog: pytest.LogCaptureFixture) -> None:
    consumer = FakeConsumer(OWNED)
    watch, forgotten = remade(consumer)
    consumer._client.cluster.id = "old"
    assert not watch.topic_made_again()
    assert not watch.topic_made_again()
    consumer._client.cluster.id = "new"
    with caplog.at_level(logging.WARNING, "fleetwatch"):
        assert watch.topic_made_again()
    assert set(consumer.sought) == OWNED and set(forgotten) == OWNED
    assert consumer.committed == dict.fromkeys(OWNED, 0)  # the group's offsets set back
    assert watch.count == 2
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"topic {TOPIC!r} was made again" in line and "old" in line and "new" in line
    assert not watch.topic_made_again()  # said once
    watch.assigned(OWNED)  # a later rebalance keeps the group's offsets
    assert len(consumer.sought) == 2


def test_made_again_while_owning_nothing_reads_the_next_partitions_from_their_start() -> None:
    consumer = FakeConsumer(set())
    watch, forgotten = remade(consumer)
    consumer._client.cluster.id = "old"
    watch.topic_made_again()
    consumer._client.cluster.id = "new"
    assert watch.topic_made_again()
    assert consumer.sought == [] and consumer.committed == {}
    watch.assigned(OWNED)  # the group joined again: offsets it holds may be the old log's
    assert set(consumer.sought) == OWNED and set(forgotten) == OWNED and watch.count == 2
    watch.assigned(OWNED)
    assert len(consumer.sought) == 2


def test_a_log_ending_below_the_position_asks_for_the_topics_metadata() -> None:
    consumer = FakeConsumer(OWNED)
    watch, forgotten = remade(consumer)
    tp = TopicPartition(TOPIC, 3)
    watch.log_ended(tp, 812, 37)
    assert consumer.sought == [tp] and forgotten == [tp] and watch.count == 1
    assert consumer._client.cluster.updates == 1
