"""Which partitions a consumer group has stored to their end (``kafka_settled``), over a
real broker: the group's committed offset of each reaching the partition's end. The rack
judge of another member's nodes judges them on its own time only then."""

from __future__ import annotations

import time
import uuid

import pytest

from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from tests.servers import Server

pytestmark = pytest.mark.kafka
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


def test_a_partition_is_settled_once_its_group_committed_it_to_its_end(
        kafka: Server) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 2)
    consumer = KafkaConsumer(kafka.address, topic, f"processors-{run}", **FAST)
    producer = KafkaProducer(kafka.address)
    try:
        key = next(k for k in (f"n{i}".encode() for i in range(50))
                   if consumer.partition_of(k) == (topic, 1))
        both = {(topic, 0), (topic, 1)}
        for _ in range(3):
            producer.send(topic, b"frame", key)
        producer.flush(10)
        # Not asked before the member has joined its group (nor while it rejoins).
        assert consumer.settled(both) is None
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 3:
            assert time.monotonic() < deadline, "the messages never came"
            got += consumer.poll(100, 0.5)
        assert consumer.settled(both) == frozenset()  # read, nothing committed yet
        consumer.commit(got)
        # Partition 0 holds nothing and has no commit: not known to be stored.
        assert consumer.settled(both) == {(topic, 1)}
        for _ in range(2):  # two more batches, not read yet
            producer.send(topic, b"frame", key)
            producer.flush(10)
        assert consumer.settled(both) == frozenset()
    finally:
        producer.close()
        consumer.close()
