"""Agents whose ``bus.partitions`` differs from the processors' never delete the topic.

Against the real Tansu broker (which cannot add partitions): a processor with
``bus.partitions = 4`` creates the topics, then two agents start, one with 12 (the
default) and one with 2. Before, the first deleted and recreated the live frames topic
and the processor, still holding the old partitions, stored nothing. Every frame each
agent counts as sent must be in the processor's store.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from fleetwatch.agent_service import AgentService
from fleetwatch.config import (
    AgentConfig,
    BusConfig,
    Config,
    NodeConfig,
    ProcessorConfig,
    StoreConfig,
)
from fleetwatch.process_service import run_processor
from tests.bus.test_agent_topics import partitions_of
from tests.servers import Server, free_port, wait_for

pytestmark = pytest.mark.kafka


def frames_stored(db: Path, node: str) -> int:
    """Frames of ``node`` in the store: one sample timestamp per frame (one GPU)."""
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (n,) = con.execute("SELECT COUNT(DISTINCT s.ts) FROM samples s JOIN devices d "
                           "ON s.did = d.id WHERE d.node = ?", (node,)).fetchone()
        return int(n)
    except sqlite3.OperationalError:  # the schema is not made yet
        return 0
    finally:
        con.close()


def agent(broker: Server, tmp_path: Path, node: str, partitions: int) -> AgentService:
    config = Config(node=NodeConfig("dc1", "rack-1", node),
                    agent=AgentConfig(interval_s=0.5, spool_dir=str(tmp_path / node),
                                      metrics_port=free_port(), kernel_log=""),
                    bus=BusConfig(kind="kafka", bootstrap=broker.address,
                                  partitions=partitions))
    return AgentService(config, fake_gpus=1)


def test_agents_with_other_partition_counts_lose_no_frame(
        own_kafka: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "fw.db"
    config = Config(bus=BusConfig(kind="kafka", bootstrap=own_kafka.address, partitions=4),
                    store=StoreConfig(kind="sqlite", path=str(db)),
                    processor=ProcessorConfig(metrics_port=free_port()))
    stop_processor = threading.Event()
    processor = threading.Thread(target=run_processor, args=(config, stop_processor),
                                 daemon=True)
    processor.start()
    stop_agents = threading.Event()
    threads: list[threading.Thread] = []
    try:
        # The processor holds its partitions, and the topics are still empty, before the
        # first agent comes: the case where the topic used to be deleted under it.
        with caplog.at_level(logging.INFO, "fleetwatch"):
            wait_for("the processor's partitions", lambda: "partitions assigned: "
                     f"{config.bus.topic}/0" in caplog.text, timeout_s=60)
        agents = {"node-12": agent(own_kafka, tmp_path, "node-12", 12),
                  "node-2": agent(own_kafka, tmp_path, "node-2", 2)}
        for node, service in agents.items():
            threads.append(threading.Thread(target=service.run, args=(stop_agents,),
                                            daemon=True))
            threads[-1].start()
            if node == "node-12":
                wait_for("the first agent's frames", lambda s=service: s.producer is not None
                         and s.producer.sent >= 3, timeout_s=60)
        wait_for("frames sent by both agents", lambda: all(
            s.producer is not None and s.producer.sent >= 10 for s in agents.values()),
            timeout_s=60)
        stop_agents.set()
        for t in threads:
            t.join(30)
        sent = {node: s.producer.sent for node, s in agents.items() if s.producer}
        wait_for(f"every frame sent stored ({sent})", lambda: all(
            frames_stored(db, node) >= n for node, n in sent.items()), timeout_s=90)
    finally:
        stop_agents.set()
        stop_processor.set()
        processor.join(60)
    assert {node: frames_stored(db, node) for node in sent} == sent
    for topic in (config.bus.topic, config.bus.dead_letter_topic, config.bus.alert_topic):
        assert partitions_of(own_kafka, topic) == 4, topic  # used as it is, not recreated
