"""The README's "Webhook and Kafka payloads" lists exactly the fields fleetwatch sends: read
from what a real local webhook receiver got and what the Kafka alert sink published, so
the documentation cannot drift from the payload."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.kafka import SCHEMA_VERSION, KafkaAlertSink
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from tests.sinks.conftest import Receiver
from tests.sinks.test_sink_lanes import alert

README = Path(__file__).resolve().parents[2] / "README.md"


def documented(table: str) -> list[str]:
    text = README.read_text()
    section = re.search(rf"<!-- payload:{table} -->\n(.*?)<!-- /payload:{table} -->", text,
                        re.S)
    assert section, f"README has no payload:{table} table"
    return re.findall(r"^\| `([a-z_]+)` \|", section[1], re.M)


# A Kafka producer that keeps what it is asked to send (not an alert sink: that is
# ``tests.recording_sink.Recording``).
class Recording:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes, list[tuple[str, bytes]]]] = []

    def send(self, topic: str, value: bytes, key: bytes,
             headers: list[tuple[str, bytes]]) -> None:
        self.sent.append((topic, value, key, headers))

    def flush(self, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass


def _changes() -> list[Notice]:
    gpu = replace(alert("a"), jobs=("train-1",), serial="1650", uuid="GPU-1", users=("alice",),
                  teams=("vision",))
    rack = replace(alert("r", node="", device="rack:r1", rule="rack_cooling"), node="")
    room = replace(alert("room", node="", device="rack:*", rule="room_inlet_hot"),
                   node="", rack="*")
    ended = replace(alert("e", "resolved"), serial="1651")
    return [Notice(gpu), Notice(rack), Notice(room), Notice(ended)]


def test_the_webhook_body_is_as_documented(receiver: Receiver) -> None:
    WebhookSink(receiver.url, dashboard_url="https://fleet.example.com").send(_changes())
    (body,) = receiver.bodies
    assert list(body) == documented("webhook")  # type: ignore[arg-type]
    assert body["version"] == 1  # type: ignore[index]
    change = body["groups"][-1]["alerts"][0]  # type: ignore[index]
    gpu = next(c for g in body["groups"] for c in g["alerts"]  # type: ignore[index]
               if c["rule"] == "gpu_temp_high")
    assert list(gpu) == documented("change")
    assert set(change) <= set(documented("change"))
    ended = next(c for g in body["groups"] for c in g["alerts"]  # type: ignore[index]
                 if c["state"] == "resolved")
    assert list(ended) == [f for f in documented("change")
                           if f not in ("jobs", "users", "teams")] + documented(
        "webhook-resolved")  # about no job
    assert ended["firing_notified"] is False


def test_the_kafka_message_is_as_documented() -> None:
    producer = Recording()
    sink = KafkaAlertSink(producer, "alerts", dashboard_url="https://fleet.example.com")
    sink.send(_changes())  # type: ignore[arg-type]
    (_, value, key, headers), rack, room, ended = producer.sent
    assert "firing_notified" not in json.loads(ended[1])
    assert list(json.loads(value)) == documented("change")
    assert (key, rack[2], room[2]) == (b"n1", b"r1", b"*")
    assert [h for h, _ in headers] == ["state", "version", "notification_id"]
    assert dict(headers)["version"] == str(SCHEMA_VERSION).encode() == b"1"
    assert dict(headers)["notification_id"].decode() == json.loads(value)["notification_id"]
