"""The in-process bus of ``fleetwatch up``: bounded in memory over a long run.

What every group of a topic has committed is dropped; offsets stay those of
the whole topic; a topic nobody reads yet keeps everything; a group that is
behind, or that joins late, reads what is still held.
"""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.pipeline.bus.memory import MemoryBus

FRAME = b"x" * 4000  # about one compressed 8-GPU frame


def test_messages_every_group_committed_are_dropped_and_offsets_go_on() -> None:
    bus = MemoryBus()
    producer, consumer = bus.producer(), bus.consumer("frames", "g")
    held, offsets = 0, []
    for i in range(20_000):  # ~3.5 h of an 8-node fleet at 5 s
        producer.send("frames", i.to_bytes(4, "big") + FRAME, key=b"node")
        if i % 100 == 99:
            offsets += [m.offset for m in consumer.poll(1000, 0)]
            consumer.commit()
            held = max(held, len(bus.messages("frames")))
    assert held <= 100           # never more than one uncommitted batch
    assert bus.messages("frames") == []
    assert offsets == list(range(20_000))  # stable offsets across the drops
    assert consumer.lag() == 0
    producer.send("frames", b"next")
    (last,) = consumer.poll(10, 0)
    assert last.offset == 20_000 and last.value == b"next"


def test_a_topic_no_group_reads_keeps_everything() -> None:
    bus = MemoryBus()
    producer = bus.producer()
    reader = bus.consumer("frames", "g")
    for i in range(50):
        producer.send("frames", b"%d" % i)
        producer.send("dead", b"%d" % i)
    reader.poll(100, 0)
    reader.commit()
    assert [m.offset for m in bus.messages("dead")] == list(range(50))
    assert bus.messages("frames") == []


def test_the_slowest_group_bounds_what_is_dropped_and_reads_all_of_it() -> None:
    bus = MemoryBus()
    producer = bus.producer()
    fast, slow = bus.consumer("t", "fast"), bus.consumer("t", "slow")
    for i in range(30):
        producer.send("t", b"%d" % i)
    slow.commit(slow.poll(10, 0))       # slow has done 0..9
    fast.poll(100, 0)
    fast.commit()                       # fast has done all 30
    assert [m.offset for m in bus.messages("t")] == list(range(10, 30))
    assert [m.offset for m in slow.poll(100, 0)] == list(range(10, 30))
    slow.commit()
    assert bus.messages("t") == []


def test_a_restarted_member_replays_from_its_groups_commit() -> None:
    bus = MemoryBus()
    producer = bus.producer()
    first = bus.consumer("t", "g")
    for i in range(20):
        producer.send("t", b"%d" % i)
    batch = first.poll(20, 0)
    first.commit(batch[:8])             # 8..19 read but not committed (a store error)
    first.close()
    again = bus.consumer("t", "g")
    assert [m.offset for m in again.poll(100, 0)] == list(range(8, 20))


def test_a_group_that_joins_after_a_drop_starts_at_the_first_message_held() -> None:
    bus = MemoryBus()
    producer, first = bus.producer(), bus.consumer("t", "a")
    for i in range(10):
        producer.send("t", b"%d" % i)
    first.poll(100, 0)
    first.commit()
    producer.send("t", b"10")
    late = bus.consumer("t", "b")
    assert [(m.offset, m.value) for m in late.poll(100, 0)] == [(10, b"10")]
    assert late.lag() == 0


def test_a_member_behind_its_groups_commit_goes_on_from_what_is_held() -> None:
    bus = MemoryBus()
    producer = bus.producer()
    old, new = bus.consumer("t", "g"), bus.consumer("t", "g")  # both at offset 0
    for i in range(10):
        producer.send("t", b"%d" % i)
    new.poll(6, 0)
    new.commit()                        # 0..5 dropped; `old` is still at 0
    assert [m.offset for m in old.poll(100, 0)] == list(range(6, 10))


def test_backpressure_counts_from_the_slowest_commit_after_drops() -> None:
    bus = MemoryBus(max_backlog=5)
    producer, consumer = bus.producer(), bus.consumer("t", "g")
    for _ in range(3):                  # three rounds past max_backlog in all
        for i in range(5):
            producer.send("t", b"%d" % i)
        consumer.poll(100, 0)
        consumer.commit()
    for i in range(5):
        producer.send("t", b"%d" % i)
    start = time.monotonic()
    try:
        bus._append("t", b"full", None, (), timeout_s=0.2)
    except Exception as exc:  # BusError: 5 unconsumed messages
        assert "full" in str(exc)
    else:
        raise AssertionError("a sixth unconsumed message was taken")
    assert time.monotonic() - start >= 0.2


def test_up_holds_only_what_its_processor_has_not_committed(tmp_path: Path) -> None:
    """``up``'s own agent and processor over its bus: after hundreds of frames the bus
    holds at most the frames still in flight, and every frame was stored."""
    from fleetwatch.config import load
    from fleetwatch.up import UpOptions, build

    config = load(env={"FLEETWATCH_SIM_NODES": "2", "FLEETWATCH_SIM_GPUS": "2"})
    options = UpOptions(simulate=True, interval_s=5.0, backfill_s=3 * 3600.0, speed=3000.0,
                        store=str(tmp_path / "up.db"))
    system, _ = build(config, options)
    topic = config.bus.topic
    system.start()
    try:
        deadline = time.monotonic() + 60
        while system.processor.stats.frames < 600 and time.monotonic() < deadline:
            time.sleep(0.05)
        sent = system.agent.frames_sent
    finally:
        left = system.stop()
    assert sent >= 600 and left == 0
    assert len(system.bus.messages(topic)) <= 50, len(system.bus.messages(topic))
