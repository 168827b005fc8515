"""The Kafka alert topic: every alert change as one JSON message (``change_json``), keyed by
node (a rack alert by its rack, a room alert by ``*``), with the headers ``state``,
``version`` (``SCHEMA_VERSION``: the message's layout, raised only for a change a consumer
must know of; fields are added, never renamed) and ``notification_id`` (the change's dedupe
key). The README's "Webhook and Kafka payloads" lists every field."""

from __future__ import annotations

import json
from collections.abc import Sequence

from fleetwatch.pipeline.bus import BusError, Producer
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.base import SinkError, change_json, notification_id

SCHEMA_VERSION = 1


class KafkaAlertSink:
    """Publishes each change to ``topic``; keyed by node (rack alerts by rack), so
    one subject's changes stay in order on one partition."""

    name = "kafka"
    notify_only = False

    def __init__(self, producer: Producer, topic: str, timeout_s: float = 10.0,
                 dashboard_url: str = "") -> None:
        self.producer, self.topic, self.timeout_s = producer, topic, timeout_s
        self.dashboard_url = dashboard_url  # each change's ``link`` (``links``); "": none

    def send(self, changes: Sequence[Notice]) -> None:
        try:
            for n in changes:
                key = (n.alert.node or n.alert.rack).encode()
                body = json.dumps(change_json(n, self.dashboard_url)).encode()
                self.producer.send(self.topic, body, key, headers=[
                    ("state", n.alert.state.encode()),
                    ("version", str(SCHEMA_VERSION).encode()),
                    ("notification_id", notification_id(n).encode())])
            self.producer.flush(self.timeout_s)
        except BusError as exc:
            raise SinkError(f"alert topic {self.topic}: {exc}") from exc

    def close(self) -> None:
        self.producer.close()
