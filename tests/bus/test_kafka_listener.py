"""What the Kafka clients say about where they connect: a listener that answers but is not
Kafka (not "cannot be reached", and at once), and a topic created because it did not exist
(a misspelt bus.topic would otherwise go unseen)."""

from __future__ import annotations

import http.server
import logging
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from fleetwatch.config import BusConfig
from fleetwatch.pipeline.bus import BusError
from fleetwatch.pipeline.bus.kafka import ensure_topic
from fleetwatch.pipeline.bus.kafka_access import not_kafka
from fleetwatch.wiring import ensure_topics, open_consumer
from tests.servers import Server


@pytest.fixture
def http_address() -> Iterator[str]:
    """An HTTP server (as an S3 endpoint or a dashboard would be) on a loopback port."""

    class Quiet(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_http_server_is_named_as_not_kafka_at_once(http_address: str) -> None:
    start = time.monotonic()
    why = not_kafka(http_address, None)
    assert time.monotonic() - start < 2
    assert why is not None and why.startswith("something answers there but not as Kafka "
                                              "(it said ")
    assert "check bus.bootstrap" in why


def test_every_client_says_not_kafka_not_cannot_reach(
        http_address: str, caplog: pytest.LogCaptureFixture) -> None:
    bus = BusConfig(kind="kafka", bootstrap=http_address)
    with pytest.raises(BusError) as err:
        open_consumer(bus)
    assert str(err.value).startswith(f"no Kafka at {http_address}: something answers")
    with caplog.at_level(logging.WARNING, logger="fleetwatch.wiring"):
        start = time.monotonic()
        assert ensure_topics(bus) is False
        assert time.monotonic() - start < 5
    lines = [r.getMessage() for r in caplog.records if r.name == "fleetwatch.wiring"]
    assert len(lines) == 1 and "but not as Kafka" in lines[0], lines
    assert "cannot be reached" not in lines[0] and "create it with your Kafka" not in lines[0]


@pytest.mark.kafka
def test_kafka_itself_is_taken_for_kafka(kafka: Server) -> None:
    assert not_kafka(kafka.address, None) is None
    assert not_kafka(kafka.address, {"security_protocol": "SASL_PLAINTEXT"}) is None


@pytest.mark.kafka
def test_a_topic_created_because_it_did_not_exist_is_said_once(
        kafka: Server, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"fleetwatch.frame-{uuid.uuid4().hex[:6]}"  # as a misspelt bus.topic
    with caplog.at_level(logging.INFO, logger="fleetwatch.pipeline.bus.kafka"):
        assert ensure_topic(kafka.address, topic, 3) == 3
        assert ensure_topic(kafka.address, topic, 3) == 3
    said = [r.getMessage() for r in caplog.records if "created topic" in r.getMessage()]
    assert said == [f"created topic {topic} with 3 partitions on {kafka.address}: it did not "
                    "exist. If agents already run, check that they and the processors name "
                    "the same topics (bus.topic)"]
