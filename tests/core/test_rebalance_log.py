"""A consumer-group rebalance is routine, not an outage (upgrader round 20, #4): the
commit Kafka refuses while the group rebalances is logged at INFO in words, the batch is
committed after it, and a real outage is still a WARNING "bus unavailable"."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import kafka.errors as kerr
import pytest
from kafka import TopicPartition

from fleetwatch.pipeline.bus import BusError, BusRebalancing
from fleetwatch.pipeline.bus.kafka import KafkaConsumer
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import T0, TOPIC, Running, frame, send, wait_for
from tests.store.helpers import stored


class _Refusing:
    """kafka-python's consumer whose commit fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(TOPIC, 0)}

    def commit(self, offsets: object, timeout_ms: int) -> None:
        raise self.error


def _kafka_consumer(error: Exception) -> KafkaConsumer:
    c = KafkaConsumer.__new__(KafkaConsumer)   # no broker: only commit's mapping is tested
    c._consumer, c._topic, c._commit_timeout_ms = _Refusing(error), TOPIC, 1000
    c._lock, c._returned = threading.Lock(), {TopicPartition(TOPIC, 0): 5}
    return c


def test_kafka_refusing_a_commit_while_the_group_rebalances_is_a_rebalance() -> None:
    with pytest.raises(BusRebalancing, match="rebalanc"):
        _kafka_consumer(kerr.RebalanceInProgressError("test")).commit()
    with pytest.raises(BusError) as got:                      # an outage stays one
        _kafka_consumer(kerr.KafkaTimeoutError("test")).commit()
    assert not isinstance(got.value, BusRebalancing)


@pytest.mark.parametrize("error,level,words", [
    (BusRebalancing("cannot commit: [Error 27] RebalanceInProgressError (test)"),
     logging.INFO, "group rebalancing (a member joined or left); committing after it"),
    (BusError("cannot commit: KafkaTimeoutError (test)"), logging.WARNING, "bus unavailable")])
def test_a_refused_commit_is_logged_as_what_it_is(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, error: BusError, level: int,
        words: str) -> None:
    bus = MemoryBus()
    send(bus, [frame("n1", T0 + i) for i in range(5)])
    db = tmp_path / "s.db"
    run = Running(bus, Processor(SqliteStore(db)), batch=5)
    commit, refused = run.consumer.commit, []

    def once(messages=None):  # type: ignore[no-untyped-def]
        if not refused:
            refused.append(1)
            raise error
        commit(messages)

    run.consumer.commit = once  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="fleetwatch.pipeline"), run:
        wait_for(lambda: stored(db) == 5 and bus._committed.get((TOPIC, "g")) == 5)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "commit" in r.getMessage()]
    assert [lvl for lvl, m in said if words in m] == [level], said
    if level == logging.INFO:
        assert not any(lvl >= logging.WARNING for lvl, _ in said), said
