"""A partition whose log ends below the consumer's position (the broker came back empty,
the topic was re-created) is read again from its start, counted and said, instead of
every message below the old position being skipped with the lag clamped at 0."""

from __future__ import annotations

import logging
import threading

import pytest
from kafka import TopicPartition

from fleetwatch.pipeline.bus.kafka_consumer import KafkaConsumer
from fleetwatch.pipeline.bus.kafka_remade import Remade

TP = TopicPartition("fleetwatch.frames", 2)


class FakeClient:
    """kafka-python's consumer, as far as the lag check reads it."""

    def __init__(self, high: int, position: int) -> None:
        self.high, self.pos = high, position
        self.sought: list[TopicPartition] = []

    def assignment(self) -> set[TopicPartition]:
        return {TP}

    def highwater(self, tp: TopicPartition) -> int:
        return self.high

    def position(self, tp: TopicPartition, timeout_ms: int = 0) -> int:
        return self.pos

    def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, 0)

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self.sought.extend(tps)
        self.pos = 0


def consumer(client: FakeClient, returned: int | None) -> KafkaConsumer:
    c = KafkaConsumer.__new__(KafkaConsumer)
    c._consumer = client
    c._lock = threading.Lock()
    c._returned = {} if returned is None else {TP: returned}
    c._listed, c._paused, c._behind = {}, False, frozenset()
    c._remade = Remade(client, TP.topic, c._forget)  # type: ignore[arg-type]
    return c


@pytest.mark.parametrize("returned", [812, None])  # read here, or a committed offset
def test_a_log_ending_below_the_position_is_read_from_its_start(
        returned: int | None, caplog: pytest.LogCaptureFixture) -> None:
    client = FakeClient(high=37, position=812)
    c = consumer(client, returned)
    with caplog.at_level(logging.WARNING, "fleetwatch"):
        lag = c._measure_lag()
    assert client.sought == [TP] and c.offsets_reset == 1
    assert TP not in c._returned  # the old position is never committed on the new log
    assert (TP.topic, TP.partition) in c.behind()  # its nodes are not judged on it yet
    assert lag == 0 or lag is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "'fleetwatch.frames' partition 2" in line and "812" in line and "37" in line
    assert "from its start" in line


def test_a_position_at_or_below_the_log_end_is_left_alone() -> None:
    for high, pos in ((812, 812), (900, 812)):
        client = FakeClient(high=high, position=pos)
        c = consumer(client, pos)
        assert c._measure_lag() == high - pos
        assert client.sought == [] and c.offsets_reset == 0
