"""Acknowledgements that prove nothing (``pipeline.bus.kafka_acks``): a producer client
that outlived a broker restart writes to the topic as it was, and Tansu acknowledges
writes to partitions (or a topic) it no longer has. The ledger tells them apart from
ordinary acknowledgements, on which nothing must change."""

from __future__ import annotations

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
