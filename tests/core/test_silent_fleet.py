"""Every agent stops at once: a live processor still pages each node ``node_silent``.

No frame arrives, so the stream's clock stands still; the processor's polls that
bring nothing tick the silent-node rule on its own clock (``Processor.tick``). Over
the in-process bus and a real SQLite store, with live timestamps.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus.memory import MemoryBus, MemoryConsumer
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import TOPIC, frame, send, wait_for
from tests.core.test_silent_takeover import silent_alerts

NODES = ("a", "b", "c")
SILENT_MIN_S = 3.0
INTERVAL_S = 0.25


def test_when_every_agent_stops_each_node_is_paged_within_silent_min_s(
        tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    bus, store = MemoryBus(), SqliteStore(db)
    config = DetectorsConfig(silent_min_s=SILENT_MIN_S)
    processor = Processor(store, [NodeSilence(config)])
    stop = threading.Event()
    thread = threading.Thread(target=processor.run,
                              args=(MemoryConsumer(bus, TOPIC, "g"), stop, 50), daemon=True)
    thread.start()
    try:
        for _ in range(8):                     # 2 s of live frames from every node
            last = time.time()                 # (the last frames' time: the limit's start)
            send(bus, [frame(n, last) for n in NODES])
            time.sleep(INTERVAL_S)
        # then every agent stops
        wait_for(lambda: processor.stats.frames == 8 * len(NODES))
        assert silent_alerts(db) == []
        wait_for(lambda: len(silent_alerts(db)) == len(NODES), timeout_s=SILENT_MIN_S + 10)
        paged = time.time()
    finally:
        stop.set()
        thread.join(30)
        store.close()
    assert not thread.is_alive()
    alerts = silent_alerts(db)
    assert sorted(a.node for a in alerts) == list(NODES)       # one alert per node
    for a in alerts:
        assert a.severity == "critical" and a.device == "host"
        assert a.started_ts - last >= SILENT_MIN_S - 0.5       # not before the limit
        assert a.started_ts <= paged
        assert f"{a.node} has sent nothing for" in a.message
    assert paged - last <= SILENT_MIN_S + 4                      # and soon after it


def test_a_fleet_that_keeps_sending_is_not_paged_by_the_ticks(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    bus, store = MemoryBus(), SqliteStore(db)
    processor = Processor(store, [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))])
    stop = threading.Event()
    thread = threading.Thread(target=processor.run,
                              args=(MemoryConsumer(bus, TOPIC, "g"), stop, 50), daemon=True)
    thread.start()
    try:
        for _ in range(int(3 * SILENT_MIN_S / 0.5)):   # every 0.5 s: polls between bring none
            send(bus, [frame(n, time.time()) for n in NODES])
            time.sleep(0.5)
        wait_for(lambda: processor.stats.frames == int(3 * SILENT_MIN_S / 0.5) * len(NODES))
    finally:
        stop.set()
        thread.join(30)
        store.close()
    assert silent_alerts(db) == []


class BrokersAway(MemoryConsumer):
    """Polls that bring nothing because the brokers are away (or the group rebalances)."""

    away = threading.Event()

    def listening(self) -> bool:
        return not self.away.is_set()


def test_time_the_brokers_are_away_counts_against_no_node(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    bus, store = MemoryBus(), SqliteStore(db)
    processor = Processor(store, [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))])
    stop = threading.Event()
    consumer = BrokersAway(bus, TOPIC, "g")
    thread = threading.Thread(target=processor.run, args=(consumer, stop, 50), daemon=True)
    thread.start()
    try:
        for _ in range(8):
            send(bus, [frame(n, time.time()) for n in NODES])
            time.sleep(INTERVAL_S)
        wait_for(lambda: processor.stats.frames == 8 * len(NODES))
        consumer.away.set()                    # the brokers go away for 2 x silent_min_s
        time.sleep(2 * SILENT_MIN_S)
        assert silent_alerts(db) == []
        consumer.away.clear()                  # back: the agents' spooled frames come
        send(bus, [frame(n, time.time()) for n in NODES])
        wait_for(lambda: processor.stats.frames == 9 * len(NODES))
        time.sleep(1.5)
    finally:
        stop.set()
        thread.join(30)
        store.close()
    assert silent_alerts(db) == []


class BrokersHung(MemoryConsumer):
    """A broker that hangs: kafka-python still holds its connection and its coordinator
    (``listening``'s first checks hold) until its next answer; ``unheard_s`` grows."""

    hung_at: float | None = None

    def listening(self) -> bool:
        return True

    def unheard_s(self) -> float:
        return 0.0 if self.hung_at is None else time.monotonic() - self.hung_at


def test_time_since_the_brokers_last_answered_counts_against_no_node(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    bus, store = MemoryBus(), SqliteStore(db)
    processor = Processor(store, [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))])
    stop = threading.Event()
    consumer = BrokersHung(bus, TOPIC, "g")
    thread = threading.Thread(target=processor.run, args=(consumer, stop, 50), daemon=True)
    thread.start()
    try:
        for _ in range(8):
            send(bus, [frame(n, time.time()) for n in NODES])
            time.sleep(INTERVAL_S)
        wait_for(lambda: processor.stats.frames == 8 * len(NODES))
        consumer.hung_at = time.monotonic()    # the broker hangs for 2 x silent_min_s
        time.sleep(2 * SILENT_MIN_S)
        assert silent_alerts(db) == []
        consumer.hung_at = None                # it answers: the spooled frames come
        send(bus, [frame(n, time.time()) for n in NODES])
        wait_for(lambda: processor.stats.frames == 9 * len(NODES))
        time.sleep(1.5)
        assert silent_alerts(db) == []
        # The agents really stop now: that silence is heard, and paged.
        wait_for(lambda: len(silent_alerts(db)) == len(NODES), timeout_s=SILENT_MIN_S + 10)
    finally:
        stop.set()
        thread.join(30)
        store.close()
