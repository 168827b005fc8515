"""Compressed batches from other producers: decoded with every codec Kafka producers use,
and a batch that cannot be decoded (a codec missing, a corrupt batch) is passed over with a
line naming it, never a consumer spinning inside ``poll``."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path

import kafka.codec as kafka_codec
import pytest
from kafka import KafkaProducer as ClientProducer
from kafka import TopicPartition
from kafka.consumer.fetcher import Fetcher
from kafka.record.memory_records import MemoryRecordsBuilder
from prometheus_client import CollectorRegistry, generate_latest

from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, ensure_topic
from fleetwatch.pipeline.bus.kafka_batches import undecodable
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server

FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 2000}
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def value(name: str) -> bytes:
    # Compressible: kafka-python sends a batch uncompressed when compression would not help.
    return name.encode() + b"." * 200


def batch_bytes(codec: str, first: int, n: int) -> bytes:
    builder = MemoryRecordsBuilder(2, CODECS[codec], 1 << 20, offset=first)
    for i in range(n):
        builder.append(int(time.time() * 1000), None, value(f"m{first + i}"))
    builder.close()
    return bytes(builder.buffer())


def take(raw: bytes, first: int) -> list[object]:
    """kafka-python's own fetcher code decoding one fetched partition's bytes."""
    from kafka.record import MemoryRecords
    part = Fetcher.PartitionRecords(first, TopicPartition("t", 3), MemoryRecords(raw))
    return part.take()


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_every_codec_kafka_producers_use_is_installed(codec: str) -> None:
    records = take(batch_bytes(codec, 40, 3), 40)
    assert [r.value for r in records] == [value("m40"), value("m41"), value("m42")]  # type: ignore[attr-defined]


def test_a_batch_of_a_missing_codec_is_located_from_its_header(
        monkeypatch: pytest.MonkeyPatch) -> None:
    raw = batch_bytes("zstd", 40, 7)
    monkeypatch.setattr(kafka_codec, "has_zstd", lambda: False)
    with pytest.raises(Exception) as caught:
        take(raw, 40)
    bad = undecodable(caught.value)
    assert bad is not None
    assert (bad.tp, bad.first, bad.next_offset) == (TopicPartition("t", 3), 40, 47)
    assert bad.reason == ("UnsupportedCodecError: Libraries for zstd compression codec not "
                          "found")


def test_a_corrupt_batch_is_located_and_fetching_from_its_middle_skips_the_rest() -> None:
    raw = bytearray(batch_bytes("gzip", 100, 5))
    raw[-3] ^= 0xFF  # in the compressed records: the CRC check fails
    with pytest.raises(Exception) as caught:
        take(bytes(raw), 102)
    bad = undecodable(caught.value)
    assert bad is not None and "CorruptRecordError" in bad.reason
    assert (bad.first, bad.next_offset) == (102, 105)


def test_an_error_not_raised_while_decoding_is_not_taken_for_a_bad_batch() -> None:
    assert undecodable(RuntimeError("connection reset")) is None


def registry_of(c: KafkaConsumer, db: Path) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(Processor(SqliteStore(db)), c))
    return registry


def produce(kafka: Server, topic: str, codec: str | None, values: list[bytes]) -> None:
    p = ClientProducer(bootstrap_servers=kafka.address, compression_type=codec,
                       enable_idempotence=False)
    for v in values:
        p.send(topic, v, key=b"k")
    p.flush(10)
    p.close()


def read_in_thread(c: KafkaConsumer, n: int, timeout_s: float) -> tuple[list[Message], bool]:
    """Polls from another thread, so that a poll that never returns fails the test."""
    out: list[Message] = []
    done = threading.Event()

    def run() -> None:
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            out.extend(c.poll(100, timeout_s=0.5))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return out, done.wait(timeout_s + 10)


@pytest.mark.kafka
@pytest.mark.parametrize("codec", ["zstd", "snappy"])
def test_a_foreign_compressed_batch_is_decoded(kafka: Server, codec: str) -> None:
    topic = f"codec-{codec}-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.address, topic, 1)
    produce(kafka, topic, codec, [value("compressed-1"), value("compressed-2")])
    produce(kafka, topic, None, [b"plain"])
    c = KafkaConsumer(kafka.address, topic, f"g-{topic}", **FAST)
    try:
        got, returned = read_in_thread(c, 3, 30)
        assert returned
        assert [m.value for m in got] == [value("compressed-1"), value("compressed-2"), b"plain"]
    finally:
        c.close()


@pytest.mark.kafka
def test_a_batch_of_a_missing_codec_is_passed_over_and_the_next_messages_come(
        kafka: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        tmp_path: Path) -> None:
    topic = f"codec-missing-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.address, topic, 1)
    produce(kafka, topic, "zstd", [value("z1"), value("z2"), value("z3")])
    produce(kafka, topic, None, [b"after-1", b"after-2"])
    monkeypatch.setattr(kafka_codec, "has_zstd", lambda: False)  # as where it is not installed
    c = KafkaConsumer(kafka.address, topic, f"g-{topic}", **FAST)
    try:
        with caplog.at_level(logging.ERROR, logger="fleetwatch.pipeline.bus.kafka"):
            got, returned = read_in_thread(c, 2, 30)
        assert returned, "poll never returned after the batch it could not decode"
        assert [m.value for m in got] == [b"after-1", b"after-2"]
        assert [m.offset for m in got] == [3, 4] and c.passed_over == 3
        scraped = generate_latest(registry_of(c, tmp_path / "s.db")).decode()
        assert "fleetwatch_processor_undecodable_messages_total 3.0" in scraped
        # One line per record batch passed over: the broker may keep the three in one or more.
        lines = [r.getMessage() for r in caplog.records if "passed over" in r.getMessage()]
        assert lines and f"topic {topic!r} partition 0: passed over offsets 0 to" in lines[0]
        assert lines[-1].split("passed over offsets ")[1].split(",")[0].endswith(" to 2")
        line = lines[0]
        assert "zstd compression codec not found" in line and "zstandard" in line
        # Lag against the broker's high watermark: nothing left behind the skipped batch.
        c.commit(got)
        c.poll(10, timeout_s=0.5)
        assert c.lag() == 0
    finally:
        c.close()


@pytest.mark.kafka
def test_the_lag_is_unknown_while_a_poll_has_not_returned_for_long(kafka: Server) -> None:
    """The wedge froze the lag at 2 while the broker had 1,917 waiting: a figure that old
    is not given; the metric is absent (unknown) until poll returns and measures again."""
    topic = f"stuck-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.address, topic, 1)
    produce(kafka, topic, None, [b"a", b"b", b"c"])
    c = KafkaConsumer(kafka.address, topic, f"g-{topic}", **FAST)
    try:
        got, returned = read_in_thread(c, 3, 30)
        assert returned and len(got) == 3 and c.lag() == 0
        release = threading.Event()
        real_poll = c._consumer.poll
        c._consumer.poll = lambda **kw: (release.wait(10), real_poll(**kw))[1]
        c.stale_after_s = 0.5
        stuck = threading.Thread(target=c.poll, args=(10, 0.1), daemon=True)
        stuck.start()
        time.sleep(1.0)
        assert c.lag() is None
        release.set()
        stuck.join(10)
        assert c.lag() == 0
    finally:
        c.close()
