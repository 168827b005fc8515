"""A fetch kafka-python cannot encode (an option past the protocol's INT32 range) stops the
processor naming the option's table, instead of storing nothing while it says it consumes."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus import BusBroken
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server

pytestmark = pytest.mark.kafka


def test_an_unencodable_fetch_stops_the_processor_naming_it(
        kafka: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    topic, group = f"huge-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.address, topic, 1)
    producer = KafkaProducer(kafka.address)
    producer.send(topic, encode(Frame("c", "r", "n", time.time() - 5, (
        GpuReading(0, "GPU-0", "H100", {"gpu_temp_c": 50.0}),))), b"n")
    producer.flush()
    producer.close()
    # What the config's check now refuses at load: given straight to the client here.
    consumer = KafkaConsumer(kafka.address, topic, group, session_timeout_ms=6000,
                             heartbeat_interval_ms=2000,
                             options={"max_partition_fetch_bytes": 2**40})
    store = SqliteStore(tmp_path / "s.db")
    raised: list[BaseException] = []

    def run() -> None:
        try:
            Processor(store).run(consumer, threading.Event(), 10, 3600.0)
        except BaseException as exc:  # noqa: BLE001 - what the test looks at
            raised.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(60)
    consumer.close()
    assert not worker.is_alive()
    (exc,) = raised
    assert isinstance(exc, BusBroken) and "[bus.kafka_consumer]" in str(exc)
    assert "consuming again" not in caplog.text
