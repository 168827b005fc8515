"""What a hostile or foreign producer can do to the processor's metrics, log and dead letters.

Findings 5 to 8 of the chaos run (r14): the dead-letter counter's ``field`` label came from
the message (2,000 unknown metric ids made 2,000 series, a 200 KB key a 200 KB label); a
1 MB value made a 1 MB log line and reason; a burst of 20,000 bad messages made 20,000
WARNING lines; a store-refused frame's reason named another frame. Over the in-process bus
and a real SQLite store.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from pathlib import Path

import msgpack
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.dead_letters import DeadLetterLog
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import StoreRejected
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.window import AcceptWindow

TOPIC, DEAD = "frames", "frames.dead"
T0 = time.time() - 3600
LOGGER = "fleetwatch.pipeline.processor"


def frame(node: str, ts: float = T0) -> Frame:
    return Frame("c1", "r1", node, ts, (GpuReading(0, f"GPU-{node}", "H100",
                                                   {"gpu_temp_c": 50.0}),))


def with_metric(node: str, key: object, ts: float = T0, value: object = 1.0) -> bytes:
    """A good frame whose GPU carries one more metric, keyed ``key``."""
    body = msgpack.unpackb(encode(frame(node, ts)), strict_map_key=False)
    body[6][0][5][key] = value
    return msgpack.packb(body, use_bin_type=True)


def scrape(processor: Processor, consumer) -> str:  # type: ignore[no-untyped-def]
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, consumer))
    return generate_latest(registry).decode()


def dead_letter_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and "dead letter" in r.getMessage()]


def test_the_dead_letter_label_is_the_fields_shape_whatever_the_key(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """2,000 frames each with an unknown metric id of its own whose value is no number, and
    one with a 200,000-char key: one series (field="gpus.metrics"); each dead letter's
    reason still names its key. 2,000 more with a number under an id of their own (a
    later release's metrics, or a crafted flood of them) are stored without it, counted in
    at most 33 series and said in at most 33 lines."""
    bus = MemoryBus(max_backlog=10_000)
    p = bus.producer()
    for i in range(2000):
        p.send(TOPIC, with_metric(f"n{i}", 10_000 + i, value="x"), f"n{i}".encode())
    p.send(TOPIC, with_metric("big", "k" * 200_000), b"big")
    for i in range(2000):
        p.send(TOPIC, with_metric(f"u{i}", 20_000 + i), f"u{i}".encode())
    p.send(TOPIC, encode(frame("good")), b"good")
    processor = Processor(SqliteStore(tmp_path / "s.db"), dead_letters=p,
                          dead_letter_topic=DEAD)
    consumer = bus.consumer(TOPIC, "g")
    caplog.set_level(logging.INFO, logger=LOGGER)
    processor.handle(consumer.poll(5000, 0))
    text = scrape(processor, consumer)
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    dead = [s for s in samples if s.name == "fleetwatch_processor_dead_letters_total"]
    assert [(s.labels, s.value) for s in dead] == [({"field": "gpus.metrics"}, 2001)]
    unknown = [s for s in samples if s.name == "fleetwatch_processor_unknown_metrics_total"]
    assert len(unknown) == 33 and sum(s.value for s in unknown) == 2000
    assert {"scope": "", "id": "other"} in [s.labels for s in unknown]
    assert max(len(line) for line in text.splitlines()) < 300
    letters = bus.messages(DEAD)
    assert len(letters) == 2001 and processor.stats.frames == 2001
    reasons = [dict(m.headers)["reason"].decode() for m in letters]
    assert reasons[0].startswith("gpus[0].metrics[10000]: unknown metric id")
    assert reasons[1999].startswith("gpus[0].metrics[11999]: unknown metric id")
    assert reasons[2000].startswith("gpus[0].metrics['kkkk") and len(reasons[2000]) < 1000
    said = [r.getMessage() for r in caplog.records if "older than the agent" in r.getMessage()]
    assert len(said) == 33 and max(len(line) for line in said) < 500


def test_a_megabyte_of_junk_makes_a_line_of_log_and_reason(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``["X" * 1_000_000]``: an unknown version of a megabyte; and a frame whose seq is it."""
    bus = MemoryBus()
    p = bus.producer()
    p.send(TOPIC, msgpack.packb(["X" * 1_000_000]), b"x")
    body = msgpack.unpackb(encode(frame("n1")), strict_map_key=False)
    body[5] = "X" * 900_000
    p.send(TOPIC, msgpack.packb(body), b"n1")
    processor = Processor(SqliteStore(tmp_path / "s.db"), dead_letters=p,
                          dead_letter_topic=DEAD)
    caplog.set_level(logging.INFO, logger=LOGGER)
    processor.handle(bus.consumer(TOPIC, "g").poll(10, 0))
    letters = bus.messages(DEAD)
    reasons = [dict(m.headers)["reason"].decode() for m in letters]
    assert len(reasons) == 2 and all(len(r) < 600 for r in reasons), [len(r) for r in reasons]
    assert reasons[0].startswith("v: unknown frame version 'XXXX")
    assert "1,000,000 characters" in reasons[0]
    assert reasons[1].startswith("seq: must be a non-negative integer, got 'XXX")
    assert all(len(m.value) > 500_000 for m in letters)  # the message itself is all there
    assert caplog.records and max(len(r.getMessage()) for r in caplog.records) < 1000


def test_a_burst_of_bad_messages_is_summarised_in_the_log_not_lost(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """20,000 messages with an unknown metric id (and a few JSON ones): the first of each
    field is logged at once, the rest counted; every one is a dead letter and counted."""
    bus = MemoryBus(max_backlog=30_000)
    p = bus.producer()
    for i in range(20_000):
        p.send(TOPIC, with_metric(f"n{i % 50}", 9999, value="hot"), f"n{i % 50}".encode())
        if i % 5000 == 0:
            p.send(TOPIC, b'{"node": "x", "temp": 50}', b"json")
    processor = Processor(SqliteStore(tmp_path / "s.db"), dead_letters=p,
                          dead_letter_topic=DEAD)
    caplog.set_level(logging.INFO, logger=LOGGER)
    consumer = bus.consumer(TOPIC, "g")
    while batch := consumer.poll(2000, 0):
        processor.handle(batch)
    lines = dead_letter_lines(caplog)
    assert len(lines) == 2, lines  # the first of each field, in the same minute
    assert any("gpus[0].metrics[9999]" in line for line in lines)
    assert any("looks like JSON" in line for line in lines)
    assert processor.stats.dead_letters == 20_004
    assert processor.stats.by_reason == {"gpus.metrics": 20_000, "frame": 4}
    assert len(bus.messages(DEAD)) == 20_004
    # On stop, what is counted since is said: one line per field, with the count.
    processor.summarise_dead_letters(final=True)
    summary = dead_letter_lines(caplog)[2:]
    assert len(summary) == 2, summary
    said = " ".join(summary)
    assert "19,999 more" in said and "3 more" in said


def test_the_summary_says_each_field_at_most_once_an_interval() -> None:
    now = [1000.0]
    said: list[str] = []
    log = DeadLetterLog(every_s=60.0, clock=lambda: now[0], say=said.append)
    log.add("ts", "t/0@1", "ts: 1.7e12 is not a time")
    log.add("ts", "t/0@2", "ts: 1.8e12 is not a time")
    log.add("gpus.metrics", "t/0@3", "gpus[0].metrics[9]: unknown metric id")
    assert len(said) == 2 and "t/0@1" in said[0] and "t/0@3" in said[1]
    now[0] += 30
    for i in range(10):
        log.add("ts", f"t/0@{10 + i}", "ts: later")
    log.flush()
    assert len(said) == 2  # still within the minute
    now[0] += 31
    log.flush()
    assert len(said) == 3
    assert "11 more" in said[2] and "field ts" in said[2] and "t/0@19" in said[2]
    log.flush()
    assert len(said) == 3  # nothing new since
    now[0] += 61
    log.add("ts", "t/0@40", "ts: once more, after a quiet minute")
    assert len(said) == 4 and said[3].startswith("dead letter from t/0@40")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_each_store_refused_dead_letter_names_its_own_frame(tmp_path: Path) -> None:
    """Two frames outside the store's window in one batch (one from 2099, one 3 days
    ahead): each dead letter names its own node and time, not the other's."""
    window = AcceptWindow(None, 2 * 86_400_000, "the test's server, at most 2 days ahead")

    class Windowed(SqliteStore):
        def write(self, frames):  # type: ignore[override]
            out = window.refused(frames)
            if out:
                raise StoreRejected(window.reason(frames, out), out)
            return super().write(frames)

    far, near = 4_070_908_800.0, time.time() + 3 * 86_400  # 2099-01-01, now + 3 d
    bus = MemoryBus()
    p = bus.producer()
    p.send(TOPIC, encode(frame("future2099", far)), b"future2099")
    p.send(TOPIC, encode(frame("ok")), b"ok")
    p.send(TOPIC, encode(frame("future3d", near)), b"future3d")
    # The store's refusals: no bound at the intake (its own test: test_clock_intake.py).
    processor = Processor(Windowed(tmp_path / "s.db"), dead_letters=p, dead_letter_topic=DEAD,
                          max_clock_ahead_s=0)
    processor.handle(bus.consumer(TOPIC, "g").poll(10, 0))
    reasons = {m.key: dict(m.headers)["reason"].decode() for m in bus.messages(DEAD)}
    assert set(reasons) == {b"future2099", b"future3d"}
    assert "c1/r1/future2099" in reasons[b"future2099"] and iso(far) in reasons[b"future2099"]
    assert "future3d" not in reasons[b"future2099"] and iso(near) not in reasons[b"future2099"]
    assert "c1/r1/future3d" in reasons[b"future3d"] and iso(near) in reasons[b"future3d"]
    assert "future2099" not in reasons[b"future3d"] and iso(far) not in reasons[b"future3d"]
    assert all("outside the times the store keeps" in r for r in reasons.values())
    assert processor.stats.store_rejected == 2 and processor.stats.by_reason == {"store": 2}


def test_frames_naming_a_dot_node_or_a_shared_gpus_made_up_users_are_dead_letters(
        tmp_path: Path) -> None:
    """r21 security review: a node ".." (its page cannot be addressed) and a job's user
    "alice,bob" (one job's energy split among made-up users) are refused, saying why."""
    import dataclasses

    bus = MemoryBus()
    p = bus.producer()
    p.send(TOPIC, encode(frame("..")), b"dots")
    split = frame("n1")
    gpu = dataclasses.replace(split.gpus[0], job="500", info={"user": "alice,bob"})
    p.send(TOPIC, encode(dataclasses.replace(split, gpus=(gpu,))), b"n1")
    p.send(TOPIC, encode(frame("good")), b"good")
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, dead_letters=p, dead_letter_topic=DEAD)
    processor.handle(bus.consumer(TOPIC, "g").poll(10, 0))
    reasons = [dict(m.headers)["reason"].decode() for m in bus.messages(DEAD)]
    assert reasons[0].startswith("node: must not be '.' or '..'")
    assert reasons[1].startswith("gpus[0].info.user: names 2 comma-separated owners for 1")
    assert processor.stats.frames == 1
