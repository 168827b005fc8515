"""The Kafka alert topic: every alert change as one JSON message, keyed by node (with
``link``, the dashboard page about it, where ``alerts.dashboard_url`` is set)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from fleetwatch.pipeline.bus import BusError, Producer
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.base import SinkError, change_json


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
                self.producer.send(self.topic, body, key,
                                   headers=[("state", n.alert.state.encode())])
            self.producer.flush(self.timeout_s)
        except BusError as exc:
            raise SinkError(f"alert topic {self.topic}: {exc}") from exc

    def close(self) -> None:
        self.producer.close()
