"""A frame stamped far in the future, against a real broker and real stores.

Through Tansu into SQLite: the processor's intake dead-letters it (the real
dead-letter topic holds it, with a reason naming the node and what to fix) and
the store never holds it. Into a real VictoriaMetrics with the intake's bound
off: the server refuses it, and the energy ledger (read back from the server)
is as if it had never come, where it used to lose every interval after it.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.integration.test_poison import FAST, read_all
from tests.servers import Server
from tests.store.helpers import cluster_name, force_flush

FAR = 4_084_473_600.0   # 2099-06-07: the codec takes it


def frame(cluster: str, node: str, ts: float) -> Frame:
    gpu = GpuReading(0, f"GPU-{node}", "NVIDIA H100 80GB HBM3",
                     {"gpu_temp_c": 50.0, "gpu_power_w": 300.0})
    return Frame(cluster, "r1", node, ts, (gpu,))


@pytest.mark.kafka
def test_a_frame_from_2099_is_dead_lettered_at_the_intake_never_stored(
        kafka: Server, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, dead = f"frames-{run}", f"frames-{run}.dead"
    ensure_topic(kafka.address, topic, 1)
    ensure_topic(kafka.address, dead, 1)
    t0 = time.time() - 600
    sent = [frame("c1", "n1", t0 + 5.0 * k) for k in range(60)]
    sent.insert(30, frame("c1", "n1", FAR))
    producer = KafkaProducer(kafka.address)
    for f in sent:
        producer.send(topic, encode(f), f.node.encode())
    producer.flush(30)
    db = tmp_path / "s.db"
    store = SqliteStore(db)
    processor = Processor(store, dead_letters=producer, dead_letter_topic=dead)
    consumer = KafkaConsumer(kafka.address, topic, f"g-{run}", **FAST)
    stop = threading.Event()
    worker = threading.Thread(target=processor.run, args=(consumer, stop, 10, 3600.0))
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while processor.stats.frames + processor.stats.dead_letters < len(sent):
            assert time.monotonic() < deadline and worker.is_alive()
            time.sleep(0.1)
    finally:
        stop.set()
        worker.join(30)
        consumer.close()
        producer.close()
        store.close()
    letters: list[Message] = read_all(kafka, dead, 1)
    assert len(letters) == 1
    reason = dict(letters[0].headers)["reason"].decode()
    assert "c1/r1/n1" in reason and "2099-06-07" in reason and "days ahead" in reason
    assert "max_clock_ahead_s" in reason and "time sync" in reason
    assert processor.stats.by_reason == {"clock": 1} and processor.stats.frames == 60
    check = SqliteStore(db, read_only=True)
    try:
        newest = max(ts for _, ts, _ in check.latest("gpu_temp_c", 0))
        rows = [r for r in check.energy(t0 - 3600, t0 + 7200, cluster="c1")]
    finally:
        check.close()
    assert newest == pytest.approx((t0 + 5.0 * 59) * 1000, abs=1)
    assert sum(r.energy_j for r in rows) == pytest.approx(300.0 * 5 * 59)
    assert sum(r.missing_s for r in rows) == 0.0


def test_a_frame_victoriametrics_refuses_moves_neither_the_ledger_nor_the_detectors(
        victoria: Server) -> None:
    cluster = cluster_name()
    t0 = time.time() - 600
    sent = [frame(cluster, "n1", t0 + 5.0 * k) for k in range(60)]
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    seen: list[float] = []

    class Seen:
        name = "seen"
        rules: dict[str, tuple[str, ...]] = {}

        def update(self, frames):  # type: ignore[no-untyped-def]
            seen.extend(f.ts for f in frames)
            return []

    processor = Processor(store, [Seen()], max_clock_ahead_s=0)   # the server judges it
    try:
        for k, batch in enumerate((sent[:30], [sent[30], frame(cluster, "n1", FAR)],
                                   sent[31:])):
            processor.handle([Message(encode(f), b"n1", "frames", 0, 100 * k + i)
                              for i, f in enumerate(batch)])
        assert processor.stats.by_reason == {"store": 1}
        assert FAR not in seen and len(seen) == 60
        force_flush(victoria.address)
        deadline = time.monotonic() + 30
        while True:
            rows = store.energy(t0 - 3600, t0 + 7200, cluster=cluster)
            total = sum(r.energy_j for r in rows)
            if total >= 300.0 * 5 * 59 - 1 or time.monotonic() > deadline:
                break
            time.sleep(1)
            force_flush(victoria.address)
    finally:
        store.close()
    assert total == pytest.approx(300.0 * 5 * 59)
    assert sum(r.missing_s for r in rows) == 0.0
