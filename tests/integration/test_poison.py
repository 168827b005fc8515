"""Poison messages against a real broker: none stops the processor, all are dead letters.

A tombstone (null value), a message larger than the dead-letter producer
can send (5 MB), a GPU ``info`` map with a list value (a ``TypeError`` in the
decoder's quick check once the key is known), and frames the store refuses
for good, each followed by valid frames. Every valid frame is stored (counted
in the store), the processor is still running, and the dead-letter topic
holds every bad one with its reason and origin.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import msgpack
import pytest
from kafka import KafkaProducer as ClientProducer

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.dead_letters import MAX_DEAD_LETTER_BYTES
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import StoreRejected
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server
from tests.store.helpers import stored

pytestmark = pytest.mark.kafka
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 2000}
REFUSED_NODE = "refused-node"


def frame(node: str, ts: float, info: dict | None = None) -> Frame:
    gpu = GpuReading(0, f"GPU-{node}", "NVIDIA H100 80GB HBM3", {"gpu_temp_c": 50.0},
                     info=info or {"pci_bus_id": "00000000:07:00.0"})
    return Frame("c1", "r1", node, ts, (gpu,))


class RefusingStore(SqliteStore):
    """Refuses, for good, every frame of one node, as a server refuses a timestamp
    outside its retention: naming them when ``named``, else not (bisected)."""

    named = True

    def write(self, frames):  # type: ignore[override]
        bad = [i for i, f in enumerate(frames) if f.node == REFUSED_NODE]
        if bad:
            raise StoreRejected("timestamp outside the retention (test)",
                                bad if self.named else None)
        return super().write(frames)


def stored_frames(db: Path) -> int:
    return stored(db)  # one sample (the GPU's temperature) a frame


def read_all(kafka: Server, topic: str, n: int, timeout_s: float = 30.0) -> list[Message]:
    c = KafkaConsumer(kafka.address, topic, f"check-{uuid.uuid4().hex[:6]}", **FAST)
    out: list[Message] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            out += c.poll(100, timeout_s=0.5)
    finally:
        c.close()
    return out


@pytest.mark.parametrize("named", [True, False], ids=["store-names-frames", "bisected"])
def test_poison_messages_are_dead_letters_and_every_valid_frame_is_stored(
        kafka: Server, tmp_path: Path, named: bool) -> None:
    run = uuid.uuid4().hex[:8]
    topic, dead = f"frames-{run}", f"frames-{run}.dead"
    ensure_topic(kafka.address, topic, 2)
    ensure_topic(kafka.address, dead, 1)
    t0 = time.time() - 600
    list_info = msgpack.unpackb(encode(frame("n-list", t0)), strict_map_key=False)
    list_info[6][0][7] = {"pci_bus_id": ["00000000:07:00.0"]}
    poison = [None, b"\x00" * (5 << 20), msgpack.packb(list_info, use_bin_type=True)]
    # kafka-python's own producer, as any client of the topic may send (a tombstone too).
    sender = ClientProducer(bootstrap_servers=kafka.address, max_request_size=8 << 20)
    valid = 0
    for round_, bad in enumerate(poison):
        for i in range(20):  # valid frames before and after each poison message
            sender.send(topic, key=f"n{i % 4}".encode(),
                        value=encode(frame(f"n{i % 4}", t0 + round_ * 20 + i)))
            valid += 1
        sender.send(topic, key=b"n-poison", value=bad)
        refused = encode(frame(REFUSED_NODE, t0 + round_))
        sender.send(topic, key=REFUSED_NODE.encode(), value=refused)
    for i in range(20):
        sender.send(topic, key=f"n{i % 4}".encode(),
                    value=encode(frame(f"n{i % 4}", t0 + 100 + i)))
        valid += 1
    sender.flush(30)
    sender.close()

    db = tmp_path / "store.db"
    store = RefusingStore(db)
    store.named = named
    consumer = KafkaConsumer(kafka.address, topic, f"processors-{run}", **FAST)
    dead_producer = KafkaProducer(kafka.address)  # default limits: 1 MiB a request
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)], dead_producer, dead)
    stop = threading.Event()
    worker = threading.Thread(target=processor.run, args=(consumer, stop, 7), daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 90
        while stored_frames(db) < valid:
            assert worker.is_alive(), "the processor stopped on a poison message"
            assert time.monotonic() < deadline, f"{stored_frames(db)} of {valid} stored"
            time.sleep(0.2)
        letters = read_all(kafka, dead, 6)
        time.sleep(1.0)  # the processor keeps running after all of them
        assert worker.is_alive()
    finally:
        stop.set()
        worker.join(60)
        consumer.close()
        dead_producer.close()
        store.close()
    assert not worker.is_alive()
    assert stored_frames(db) == valid

    assert len(letters) == 6, [dict(m.headers).get("reason") for m in letters]
    by_reason = {dict(m.headers)["reason"].decode(): m for m in letters}
    reasons = sorted(by_reason)
    tombstone = next(m for r, m in by_reason.items() if "tombstone" in r)
    assert tombstone.value == b"" and dict(tombstone.headers)["tombstone"] == b"1"
    big = next(m for r, m in by_reason.items() if "over the limit" in r)
    h = dict(big.headers)
    assert len(big.value) == MAX_DEAD_LETTER_BYTES and h["truncated"] == b"1"
    assert h["original_size"] == str(5 << 20).encode() and h["source_topic"] == topic.encode()
    assert int(h["source_offset"]) >= 0 and int(h["source_partition"]) in (0, 1)
    assert any(r.startswith("gpus[0].info") for r in reasons), reasons
    refused = [m for m in letters if b"store rejected" in dict(m.headers)["reason"]]
    assert len(refused) == 3 and all(m.key == REFUSED_NODE.encode() for m in refused)
    assert all(b"outside the retention" in dict(m.headers)["reason"] for m in refused)
    assert processor.stats.dead_letters == 6 and processor.stats.dead_letters_lost == 0
