"""One consumer group for several clusters over a real broker: node001 of c-east and of
c-eu share a partition (agents key frames by node name). c-eu's dies, c-east's goes on:
the processor pages c-eu/node001, and never reads the two as one machine."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.pipeline.bus.kafka import KafkaProducer
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import frame, wait_for
from tests.core.test_silent_takeover import silent_alerts
from tests.integration.test_silent_fleet_kafka import SILENT_MIN_S, start
from tests.servers import Server
from tests.store.helpers import stored

pytestmark = pytest.mark.kafka


def send(producer: KafkaProducer, topic: str, clusters: tuple[str, ...], seconds: float) -> int:
    sent, end = 0, time.time() + seconds
    while time.time() < end:
        for c in clusters:
            f = dataclasses.replace(frame("node001", time.time()), cluster=c)
            # Each cluster's machine has its own boards (their own UUIDs).
            f = dataclasses.replace(f, gpus=tuple(dataclasses.replace(g, uuid=f"GPU-{c}-0")
                                                  for g in f.gpus))
            producer.send(topic, encode(f), b"node001")
            sent += 1
        producer.flush(10)
        time.sleep(0.25)
    return sent


def test_a_node_dead_in_one_cluster_is_paged_while_its_namesake_reports(
        kafka: Server, tmp_path: Path) -> None:
    processor, producer, topic, db, stop, thread = start(kafka, tmp_path)
    try:
        wait_for(lambda: processor.ownership.owned, timeout_s=30)
        sent = send(producer, topic, ("c-east", "c-eu"), 3.0)
        sent += send(producer, topic, ("c-east",), SILENT_MIN_S + 6)
        wait_for(lambda: processor.stats.frames == sent, timeout_s=30)
        wait_for(lambda: silent_alerts(db) != [], timeout_s=15)
    finally:
        stop.set()
        thread.join(30)
        producer.close()
        processor.store.close()
    alerts = silent_alerts(db)
    assert [(a.cluster, a.node, a.state) for a in alerts] == [("c-eu", "node001", "firing")]
    assert stored(db) > 0
    store = SqliteStore(db, read_only=True)
    try:
        assert [a for a in store.alerts(states=("pending", "firing", "resolved"))
                if a.rule == "node_name_conflict"] == []
    finally:
        store.close()
