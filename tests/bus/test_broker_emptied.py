"""A broker that comes back empty (its disk lost, Tansu's memory storage, a topic deleted
and made again) numbers its offsets from 0 again, below the positions the consumer held.

Against the real Tansu broker: a consumer reads a topic, the broker is restarted empty and
fewer messages than before are written. Every message written after the restart must be
returned (none skipped below the old position), and no reset is counted on a healthy
broker. The reset itself (a position above the log's end) is unit-tested in
tests/bus/test_log_end_reset.py.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from fleetwatch.pipeline.bus import BusError, Message
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from tests.servers import Server

pytestmark = pytest.mark.kafka
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


def produce(broker: Server, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(broker.address)
    try:
        for i, v in enumerate(values):
            producer.send(topic, v, f"node-{i % 7}".encode())
        producer.flush(30)
    finally:
        producer.close()


def drain(consumer: KafkaConsumer, want: set[bytes], timeout_s: float,
          held: list[Message] | None = None) -> set[bytes]:
    """Poll until every message of ``want`` came; commit each batch (but the last, kept in
    ``held`` if given: a batch in hand when the broker went away)."""
    got: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not want <= got:
        try:
            messages = consumer.poll(500, 0.5)
        except Exception:  # the broker away for a moment: poll again, as the processor does
            time.sleep(0.5)
            continue
        got |= {m.value for m in messages if m.value is not None}
        if messages and held is not None:
            if held:
                consumer.commit(held)
            held[:] = messages
        elif messages:
            consumer.commit(messages)
    return got


def commit_when_back(consumer: KafkaConsumer, held: list[Message]) -> None:
    """The processor's loop commits the batch it had in hand once the broker answers."""
    deadline = time.monotonic() + 30
    while True:
        try:
            consumer.commit(held)
            return
        except BusError:
            if time.monotonic() > deadline:
                raise
            consumer.poll(10, 0.5)


def test_a_broker_back_empty_loses_no_message_and_says_so(
        own_kafka: Server, caplog: pytest.LogCaptureFixture) -> None:
    run = uuid.uuid4().hex[:8]
    topic, group = f"frames-{run}", f"processors-{run}"
    ensure_topic(own_kafka.address, topic, 2)
    before = [f"before-{i}".encode() for i in range(300)]
    produce(own_kafka, topic, before)
    consumer = KafkaConsumer(own_kafka.address, topic, group, **FAST)
    try:
        held: list[Message] = []
        assert drain(consumer, set(before), 60, held) == set(before)
        # Read to the end with no loss: nothing is reset on a healthy broker.
        for _ in range(6):
            consumer.poll(500, 0.5)
        assert consumer.offsets_reset == 0
        own_kafka.stop()
        drain(consumer, {b"none"}, 3)  # the processor polls on while the broker is away
        own_kafka.start()  # memory storage: back empty
        ensure_topic(own_kafka.address, topic, 2)
        commit_when_back(consumer, held)  # the old offsets, on the new broker
        drain(consumer, {b"none"}, 4)  # ... and back, before agents write again
        # A processor started now (a restart, a new member) starts from those offsets.
        consumer.close()
        consumer = KafkaConsumer(own_kafka.address, topic, group, **FAST)
        after = [f"after-{i}".encode() for i in range(40)]  # far fewer than the positions
        with caplog.at_level(logging.WARNING, "fleetwatch"):
            produce(own_kafka, topic, after)
            got = drain(consumer, set(after), 90)
        assert got >= set(after), f"{len(set(after) - got)} of {len(after)} messages lost"
        # kafka-python may see the topic re-created and start over itself; if not, the
        # consumer's own check did, and said so.
        said = [r.getMessage() for r in caplog.records if "log end" in r.getMessage()]
        assert len(said) == consumer.offsets_reset
    finally:
        consumer.close()


def test_a_log_made_again_past_the_old_position_loses_no_message(
        own_kafka: Server, caplog: pytest.LogCaptureFixture) -> None:
    """The new log outgrows the consumer's old position before it polls again (agents
    replaying their spools while the processor was busy): the log's end is then not below
    the position, and only the topic's new id in the metadata shows it was made again."""
    run = uuid.uuid4().hex[:8]
    topic, group = f"frames-{run}", f"processors-{run}"
    ensure_topic(own_kafka.address, topic, 1)
    before = [f"before-{i}".encode() for i in range(50)]
    produce(own_kafka, topic, before)
    consumer = KafkaConsumer(own_kafka.address, topic, group, **FAST)
    try:
        assert drain(consumer, set(before), 60) == set(before)
        own_kafka.stop()
        own_kafka.start()  # memory storage: back empty
        ensure_topic(own_kafka.address, topic, 1)
        after = [f"after-{i}".encode() for i in range(200)]  # offsets 0-199: past 50
        with caplog.at_level(logging.WARNING, "fleetwatch"):
            produce(own_kafka, topic, after)
            got = drain(consumer, set(after), 90)
        assert got >= set(after), f"{len(set(after) - got)} of {len(after)} messages lost"
        said = [r.getMessage() for r in caplog.records if "made again" in r.getMessage()]
        assert said and consumer.offsets_reset >= 1, "the re-made topic was not said"
        assert f"topic {topic!r} was made again" in said[0]
    finally:
        consumer.close()
    # The group's offsets are on the new log: a member started now reads nothing old again
    # and skips nothing (it finds the offsets this one committed as it read).
    fresh = KafkaConsumer(own_kafka.address, topic, group, **FAST)
    try:
        more = [f"more-{i}".encode() for i in range(10)]
        produce(own_kafka, topic, more)
        assert drain(fresh, set(more), 60) >= set(more)
    finally:
        fresh.close()
