"""Acknowledgements that prove nothing (``pipeline.bus.kafka_acks``): a producer client
that outlived a broker restart writes to the topic as it was, and Tansu acknowledges
writes to partitions (or a topic) it no longer has. The ledger tells them apart from
ordinary acknowledgements, on which nothing must change; and the producer acts on it."""

from __future__ import annotations

from types import SimpleNamespace

import kafka.errors as kerr
import pytest
from kafka.future import Future

from fleetwatch.pipeline.bus import BusError
from fleetwatch.pipeline.bus import kafka as kafka_bus
from fleetwatch.pipeline.bus.kafka import KafkaProducer
from fleetwatch.pipeline.bus.kafka_acks import AckLedger

T = "fleetwatch.frames"


def twelve(topic: str) -> set[int]:
    return set(range(12))


def test_growing_offsets_on_partitions_the_topic_has_are_delivered() -> None:
    acks = AckLedger()
    for offset in (0, 1, 2):
        acks.acked(T, 11, offset)
        acks.acked(T, 3, offset + 100)
    assert acks.check(twelve) is None
    assert acks.written() == {}  # a good flush starts afresh
    acks.acked(T, 11, 3)
    assert acks.check(twelve) is None


def test_an_offset_that_goes_back_is_a_log_the_broker_lost() -> None:
    acks = AckLedger()
    acks.acked(T, 11, 40)
    assert acks.check(twelve) is None
    acks.acked(T, 11, 0)  # the broker came back empty: the log starts again
    acks.acked(T, 11, 1)
    lost = acks.check(twelve)
    assert lost is not None and f"{T}/11" in lost and "offset 0" in lost and "40" in lost
    assert acks.check(twelve) == lost  # it stays lost until the client is dropped


def test_a_repeated_offset_is_lost_too() -> None:
    acks = AckLedger()
    acks.acked(T, 2, 0)
    acks.acked(T, 2, 0)
    assert acks.lost is not None


def test_a_partition_the_remade_topic_lacks_is_lost() -> None:
    acks = AckLedger()
    acks.acked(T, 9, 5)
    lost = acks.check(lambda topic: {0, 1, 2, 3})
    assert lost is not None and f"{T}/9" in lost and "4 partitions" in lost


def test_a_topic_the_broker_no_longer_has_is_lost() -> None:
    acks = AckLedger()
    acks.acked(T, 0, 5)
    lost = acks.check(lambda topic: None)
    assert lost is not None and "no partitions" in lost


def test_no_offset_given_is_not_judged() -> None:
    acks = AckLedger()  # acks=0: kafka-python gives offset -1
    acks.acked(T, 1, -1)
    acks.acked(T, 1, -1)
    assert acks.check(twelve) is None


class FakeClient:
    """kafka-python's producer as ``KafkaProducer`` uses it: each send is acknowledged at
    once at the next offset of its partition (``logs``), or refused with ``refuse``."""

    def __init__(self, logs: dict[int, int], partitions: set[int],
                 refuse: BaseException | None = None) -> None:
        self.logs, self.partitions, self.refuse = logs, partitions, refuse
        self.config = {"api_version": (3, 9)}
        self._metadata = SimpleNamespace(partitions_for_topic=lambda topic: self.partitions)

    def send(self, topic: str, value: bytes | None, key: bytes | None,
             headers: list[tuple[str, bytes]]) -> Future:
        future = Future()
        if self.refuse is not None:
            return future.failure(self.refuse)
        partition = int(key or b"0") % 12
        offset = self.logs.setdefault(partition, 0)
        self.logs[partition] = offset + 1
        return future.success(SimpleNamespace(topic=topic, partition=partition, offset=offset))

    def flush(self, timeout: float | None = None) -> None:
        pass

    def partitions_for(self, topic: str) -> set[int]:
        raise AssertionError("a metadata request: Tansu would create a missing topic")

    def close(self, timeout: float | None = None) -> None:
        pass


def producer(monkeypatch: pytest.MonkeyPatch, clients: list[FakeClient]) -> KafkaProducer:
    made = iter(clients)
    monkeypatch.setattr(kafka_bus.kafka, "KafkaProducer", lambda **config: next(made))
    monkeypatch.setattr(kafka_bus, "check_listener", lambda *args: None)
    return KafkaProducer("127.0.0.1:9")


def test_a_producer_on_a_healthy_broker_flushes_as_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    p = producer(monkeypatch, [FakeClient({11: 500}, set(range(12)))])
    for _ in range(3):
        for key in (b"11", b"3", b"11"):
            p.send(T, b"frame", key)
        p.flush(1)
    assert p.pending == 0


def test_a_producer_whose_broker_came_back_empty_fails_its_flush_then_starts_afresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    logs = {11: 500}
    first, second = FakeClient(logs, set(range(12))), FakeClient({}, set(range(4)))
    p = producer(monkeypatch, [first, second])
    p.send(T, b"frame", b"11")
    p.flush(1)
    logs.clear()  # the broker restarted empty; the client still writes to partition 11
    p.send(T, b"frame", b"11")
    with pytest.raises(BusError, match=f"{T}/11 acknowledged offset 0, not above the 500"):
        p.flush(1)
    p.send(T, b"frame", b"2")  # through a fresh client, with fresh metadata
    p.flush(1)
    assert p._client is second


def test_a_partition_the_client_now_knows_the_topic_lacks_fails_the_flush(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient({}, set(range(12)))
    p = producer(monkeypatch, [client])
    p.send(T, b"frame", b"11")
    p.flush(1)
    client.partitions = set(range(4))  # its metadata refreshed: the topic was made again
    p.send(T, b"frame", b"11")
    with pytest.raises(BusError, match=f"{T}/11 acknowledged, but topic {T} now has 4"):
        p.flush(1)


def test_a_write_kafka_refuses_fails_the_flush_as_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    refused = kerr.UnknownTopicOrPartitionError("no partition 11")
    p = producer(monkeypatch, [FakeClient({}, set(range(4)), refuse=refused)])
    with pytest.raises(BusError, match="cannot send"):
        p.send(T, b"frame", b"11")
