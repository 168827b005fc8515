"""A producer whose broker came back empty must not count as delivered what it wrote to
the topic as it was before.

Against the real Tansu broker, which acknowledges writes to a topic or partition it does
not have and keeps nothing of them: a producer writes to a 12-partition topic, the broker
is restarted empty and the topic made again with Tansu's own count (4, as a consumer's
subscription makes it), and the same producer writes again at once, with the metadata it
had. Its flush must fail (the caller, the agent's spool, sends again), and what it sends
again through its next client must all be read back (some twice: at least once).
"""

from __future__ import annotations

import logging
import time
import uuid

import kafka
import pytest

from fleetwatch.pipeline.bus import BusError
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from tests.servers import Server

pytestmark = pytest.mark.kafka
KEYS = [f"node-{i}".encode() for i in range(24)]  # over every partition of 12, and of 4


def read_all(broker: Server, topic: str, want: int) -> list[bytes]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.address,
                                   auto_offset_reset="earliest", consumer_timeout_ms=2000)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        consumer.assign([kafka.TopicPartition(topic, p) for p in parts])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            got += [m.value for m in consumer]
        return got
    finally:
        consumer.close()


def test_writes_to_a_topic_the_broker_lost_are_not_delivered(own_kafka: Server) -> None:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    topic = f"emptied-{uuid.uuid4().hex[:8]}"
    assert ensure_topic(own_kafka.address, topic, 12) == 12
    producer = KafkaProducer(own_kafka.address, auto_create_topics=False)
    try:
        for key in KEYS:
            producer.send(topic, b"before", key)
        producer.flush(10)
        own_kafka.stop()
        time.sleep(1.0)
        own_kafka.start()  # empty
        assert ensure_topic(own_kafka.address, topic, 4) == 4  # Tansu's own count
        after = [b"after-%d" % i for i in range(len(KEYS))]
        for key, value in zip(KEYS, after, strict=True):
            producer.send(topic, value, key)
        with pytest.raises(BusError, match="acknowledged .* but lost"):
            producer.flush(20)
        # The spool's part: the same messages again, through the producer's next client.
        for key, value in zip(KEYS, after, strict=True):
            producer.send(topic, value, key)
        producer.flush(20)
    finally:
        producer.close()
    # At least once: what reached a partition the topic has is there twice.
    assert set(read_all(own_kafka, topic, len(after))) == set(after)
