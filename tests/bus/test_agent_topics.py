"""Whoever starts first makes the topics as configured: the agents, in the README's order.

Against the real Tansu broker: an agent started alone on a fresh broker creates
``fleetwatch.frames`` with ``bus.partitions``, not the broker's default count; and a
topic that stays short (the broker cannot add partitions) is said
once as a warning, not at every check, and shown on the processor's ``/metrics``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka import KafkaProducer as ClientProducer

from fleetwatch.agent_service import AgentService
from fleetwatch.config import AgentConfig, BusConfig, Config, NodeConfig
from fleetwatch.pipeline.bus import topics
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, ensure_topic
from fleetwatch.pipeline.health import topic_families
from tests.servers import Server, free_port, wait_for

pytestmark = pytest.mark.kafka


def partitions_of(broker: Server, topic: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        described = admin.describe_topics([topic])
        return len(described[0]["partitions"]) if described else 0
    finally:
        admin.close()


def test_an_agent_alone_on_a_fresh_broker_creates_the_topic_with_bus_partitions(
        own_kafka: Server, tmp_path: Path) -> None:
    topic = "fleetwatch.frames"
    config = Config(node=NodeConfig("dc1", "rack-1", "node-a"),
                    agent=AgentConfig(interval_s=0.5, spool_dir=str(tmp_path / "spool"),
                                      metrics_port=free_port(), kernel_log=""),
                    bus=BusConfig(kind="kafka", bootstrap=own_kafka.address, topic=topic,
                                  partitions=12))
    service = AgentService(config, fake_gpus=1)
    assert service.producer is not None
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for("the agent's first frames acknowledged", lambda: service.producer.sent >= 3,
                 timeout_s=60)
    finally:
        stop.set()
        thread.join(30)
    assert partitions_of(own_kafka, topic) == 12
    assert partitions_of(own_kafka, config.bus.dead_letter_topic) == 12
    # And what it sent is there, once.
    sent = service.producer.sent
    c = KafkaConsumer(own_kafka.address, topic, f"g-{uuid.uuid4().hex[:6]}",
                      session_timeout_ms=6000, heartbeat_interval_ms=2000)
    got: list = []
    try:
        wait_for(f"{sent} frames read back", lambda: len(got.__iadd__(c.poll(500, 0.5)))
                 >= sent, timeout_s=60, every_s=0)
    finally:
        c.close()
    assert len(got) == sent


def test_a_topic_left_short_is_said_once_and_shown_on_metrics(
        kafka: Server, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"short-{uuid.uuid4().hex[:8]}"
    raw = ClientProducer(bootstrap_servers=kafka.address)
    try:
        auto = len(raw.partitions_for(topic))  # the broker's auto-creation, its default
        raw.send(topic, b"kept", key=b"k").get(10)
    finally:
        raw.close()
    assert auto < 12
    with caplog.at_level(logging.DEBUG, "fleetwatch"):
        assert ensure_topic(kafka.address, topic, 12) == auto
        assert ensure_topic(kafka.address, topic, 12) == auto
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"topic {topic} has {auto} partitions, fewer than "
                                "bus.partitions = 12 here, and this broker cannot add "
                                "partitions: it is used as it is")
    assert "by the broker's auto-creation" in errors[0]
    assert "an agent of an older fleetwatch" in errors[0]
    assert "a broker that lost its data" in errors[0]
    assert topics.topic_partitions[topic] == (auto, 12)
    (family,) = topic_families()
    assert family.name == "fleetwatch_processor_topic_partitions_missing"
    assert {s.labels["topic"]: s.value for s in family.samples}[topic] == 12 - auto
