"""[bus.kafka_producer] / [bus.kafka_consumer] options reach kafka-python's clients and take
effect against a real broker (Tansu): the compression the producer table names is the one
of the record batches the broker stores, and max_poll_records bounds every poll."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from fleetwatch.config import load
from fleetwatch.pipeline.bus.kafka import ensure_topic
from fleetwatch.wiring import open_consumer, open_producer
from tests.servers import Server

pytestmark = pytest.mark.kafka
GZIP, LZ4 = 1, 3  # a record batch's compression attribute


def config(tmp_path: Path, kafka: Server, tables: str):  # type: ignore[no-untyped-def]
    topic, group = f"opts-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "f.toml"
    path.write_text(f'[bus]\nkind = "kafka"\nbootstrap = "{kafka.address}"\ntopic = "{topic}"\n'
                    f'group = "{group}"\nsession_timeout_s = 6.0\n{tables}')
    ensure_topic(kafka.address, topic, 1)
    return load(path, env={}).bus


def fetched_codecs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The compression of every record batch the consumer fetches from the broker."""
    seen: list[int] = []
    next_batch = MemoryRecords.next_batch

    def spy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        batch = next_batch(self, *args, **kwargs)
        if batch is not None:
            seen.append(batch.compression_type)
        return batch

    monkeypatch.setattr(MemoryRecords, "next_batch", spy)
    return seen


def send_and_read(bus, n: int, max_messages: int = 500) -> list[int]:  # type: ignore[no-untyped-def]
    """Send ``n`` compressible messages, then poll them all back: the size of each poll."""
    producer = open_producer(bus)
    for i in range(n):
        producer.send(bus.topic, f"m{i}".encode() + b"." * 200, key=b"node")
    producer.flush(10)
    producer.close()
    consumer = open_consumer(bus)
    sizes: list[int] = []
    try:
        for _ in range(200):
            got = consumer.poll(max_messages, timeout_s=0.5)
            if got:
                sizes.append(len(got))
            if sum(sizes) >= n:
                break
    finally:
        consumer.close()
    return sizes


def test_the_producer_table_sets_the_stored_batches_compression(
        kafka: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bus = config(tmp_path, kafka, '[bus.kafka_producer]\ncompression_type = "gzip"\n'
                                  "linger_ms = 50\n")
    seen = fetched_codecs(monkeypatch)
    assert sum(send_and_read(bus, 40)) == 40
    assert seen and set(seen) == {GZIP}  # fleetwatch's own default is lz4


def test_without_a_table_fleetwatch_compresses_with_lz4(
        kafka: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bus = config(tmp_path, kafka, "")
    seen = fetched_codecs(monkeypatch)
    assert sum(send_and_read(bus, 40)) == 40
    assert seen and set(seen) == {LZ4}


def test_max_poll_records_bounds_every_poll(kafka: Server, tmp_path: Path) -> None:
    bus = config(tmp_path, kafka, "[bus.kafka_consumer]\nmax_poll_records = 7\n")
    sizes = send_and_read(bus, 50)
    assert sum(sizes) == 50 and max(sizes) == 7
