"""An agent whose topic check failed sends nothing until it passes.

Against the real Tansu broker, which creates a topic on a produce request even when the
client asks it not to: the agent runs, the broker goes away and comes back empty, and the
agent (alone: no processor) is the first to reach it. Its frames stay spooled until its
topic check passes, so the topic it sends to is created with ``bus.partitions``, not by
the broker's auto-creation (Tansu's default is fewer).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from fleetwatch.agent_service import AgentService
from fleetwatch.config import AgentConfig, BusConfig, Config, NodeConfig
from fleetwatch.pipeline.bus import BusError
from fleetwatch.pipeline.bus.kafka import KafkaProducer
from tests.bus.test_agent_topics import partitions_of
from tests.servers import Server, free_port, wait_for

pytestmark = pytest.mark.kafka


def test_an_agent_sends_nothing_to_an_emptied_broker_before_its_topics_exist(
        own_kafka: Server, tmp_path: Path) -> None:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # as the agent runs
    topic = "fleetwatch.frames"
    config = Config(node=NodeConfig("dc1", "rack-1", "node-a"),
                    agent=AgentConfig(interval_s=0.2, spool_dir=str(tmp_path / "spool"),
                                      metrics_port=free_port(), kernel_log=""),
                    bus=BusConfig(kind="kafka", bootstrap=own_kafka.address, topic=topic,
                                  partitions=6))
    service = AgentService(config, fake_gpus=1)
    producer = service.producer
    assert producer is not None
    inner = producer.inner
    assert isinstance(inner, KafkaProducer)
    checks: list[bool] = []
    ensure = service._ensure_topics

    def counted() -> bool:
        checks.append(ensure())
        return checks[-1]

    inner._prepare = counted
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for("the agent's first frames acknowledged", lambda: producer.sent >= 2,
                 timeout_s=60)
        own_kafka.stop()
        wait_for("frames spooled", lambda: producer.backlog > 0, timeout_s=60)
        failed_before = checks.count(False)
        wait_for("two failed topic checks", lambda: checks.count(False) >= failed_before + 2,
                 timeout_s=60)
        assert inner._client is None  # no client while the check fails
        with pytest.raises(BusError, match="topics could not be checked"):
            inner.send(topic, b"x")
        own_kafka.start()  # empty: the memory storage kept nothing
        sent = producer.sent + producer.replayed
        wait_for("the spool replayed and frames sent again",
                 lambda: producer.replayed > 0 and producer.sent + producer.replayed > sent + 2
                 and producer.backlog == 0, timeout_s=90)
    finally:
        stop.set()
        thread.join(30)
    assert checks[-1] is True
    assert partitions_of(own_kafka, topic) == 6
    assert partitions_of(own_kafka, config.bus.dead_letter_topic) == 6
