"""A processor that owns no partitions says so: in its log and in /metrics.

Finding 3 of the chaos run (r14): after a rolling restart against Tansu both processors
sat for minutes inside kafka-python's group join (``poll`` blocked) with no partitions:
no log line, no lag series, no rule could tell. A member one too many for the topic's
partitions looks the same. Here the consumer is a fake whose ``poll`` revokes and then
blocks, as a wedged join does, and the in-process bus for the metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.partition_watch import PartitionWatch
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore

LOGGER = "fleetwatch.pipeline.processor"


def scrape(processor: Processor, consumer) -> dict[str, float]:  # type: ignore[no-untyped-def]
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, consumer))
    text = generate_latest(registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if not s.labels}


class WedgedJoin:
    """Owns partition 0 on the first poll; on the second, its rebalance revokes it and the
    join hangs (poll does not return) until ``release``; then partition 1 comes."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.polls = 0
        self.listener = None

    def listen(self, listener) -> None:  # type: ignore[no-untyped-def]
        self.listener = listener

    def poll(self, max_messages: int = 500, timeout_s: float = 1.0) -> list[Message]:
        self.polls += 1
        assert self.listener is not None
        if self.polls == 1:
            self.listener.assigned([("t", 0)])
        elif self.polls == 2:
            self.listener.revoked([("t", 0)])
            self.release.wait(30)
            self.listener.assigned([("t", 1)])
        else:
            time.sleep(min(timeout_s, 0.05))
        return []

    def commit(self, messages=None) -> None: ...  # type: ignore[no-untyped-def]
    def pause(self) -> None: ...
    def resume(self) -> None: ...

    def lag(self) -> int | None:
        return None if self.polls < 2 else 1234  # stale: cached before the rebalance

    def partition_of(self, key: bytes) -> None:
        return None

    def close(self) -> None: ...


def test_a_member_stuck_in_its_group_join_says_so_and_shows_no_partitions(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    processor = Processor(SqliteStore(tmp_path / "s.db"))
    consumer = WedgedJoin()
    stop = threading.Event()
    worker = threading.Thread(target=processor.run, args=(consumer, stop),
                              kwargs={"no_partitions_warn_s": 0.5}, daemon=True)
    worker.start()

    def said(text: str) -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.name == LOGGER and text in r.getMessage()]
    try:
        deadline = time.monotonic() + 10
        while not said("owned no partition"):
            assert time.monotonic() < deadline, "no line while the join hangs"
            time.sleep(0.05)
        assert consumer.polls == 2 and not consumer.release.is_set()  # poll still blocked
        (line,) = said("owned no partition")
        assert "more members than the topic has partitions" in line
        assert "joining its consumer group" in line
        got = scrape(processor, consumer)
        assert got["fleetwatch_processor_partitions_owned"] == 0
        assert got["fleetwatch_processor_consumer_lag"] == 0  # present; not the stale 1234
        time.sleep(1.0)
        assert len(said("owned no partition")) == 1  # once, not every check
        consumer.release.set()
        deadline = time.monotonic() + 10
        while not said("owns 1 partition(s) again"):
            assert time.monotonic() < deadline, "no line when partitions came back"
            time.sleep(0.05)
        assert scrape(processor, consumer)["fleetwatch_processor_partitions_owned"] == 1
    finally:
        consumer.release.set()
        stop.set()
        worker.join(30)
    assert not worker.is_alive()


def test_the_in_process_member_owns_its_one_partition(tmp_path: Path) -> None:
    bus = MemoryBus()
    consumer = bus.consumer("t", "g")
    processor = Processor(SqliteStore(tmp_path / "s.db"))
    consumer.listen(processor.ownership)
    got = scrape(processor, consumer)
    assert got["fleetwatch_processor_partitions_owned"] == 0  # nothing polled: nothing owned
    assert got["fleetwatch_processor_consumer_lag"] == 0
    consumer.poll(10, 0)
    assert scrape(processor, consumer)["fleetwatch_processor_partitions_owned"] == 1


def test_the_watch_warns_once_after_the_delay_and_says_when_partitions_come() -> None:
    now = [0.0]
    watch = PartitionWatch(60.0, clock=lambda: now[0])
    assert watch.check(0) is None  # just started: joining takes a few seconds
    now[0] = 59.0
    assert watch.check(0) is None
    now[0] = 61.0
    warning = watch.check(0)
    assert warning is not None and warning[0] == logging.WARNING and "for 61 s" in warning[1]
    now[0] = 120.0
    assert watch.check(0) is None  # said once
    now[0] = 130.0
    back = watch.check(4)
    assert back is not None and back[0] == logging.INFO
    assert "owns 4 partition(s) again after 130 s" in back[1]
    assert watch.check(4) is None
    now[0] = 200.0
    assert watch.check(0) is None  # lost them again: the delay starts over
    now[0] = 259.0
    assert watch.check(0) is None
    now[0] = 261.0
    assert watch.check(0) is not None
    now[0] = 262.0
    assert watch.check(2) is not None


def test_a_member_that_owns_partitions_is_never_warned_about() -> None:
    now = [0.0]
    watch = PartitionWatch(60.0, clock=lambda: now[0])
    for t in range(0, 600, 5):
        now[0] = float(t)
        assert watch.check(2) is None
