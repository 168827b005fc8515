"""The config keys that choose sinks: alerts.alertmanager_url, alerts.webhook_url and
bus.alert_topic (read nowhere before)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fleetwatch.config import ConfigError, load
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.wiring import alert_sinks, open_notifier
from tests.servers import Server
from tests.sinks.conftest import Receiver, frame, tmp_store


def test_no_sink_unless_configured() -> None:
    assert alert_sinks(load(None, env={})) == []   # memory bus: no alert topic either


def test_each_key_turns_its_sink_on(kafka: Server) -> None:
    config = load(None, env={"FLEETWATCH_ALERTS_ALERTMANAGER_URL": "http://127.0.0.1:9093",
                             "FLEETWATCH_ALERTS_WEBHOOK_URL": "http://127.0.0.1:1/hook",
                             "FLEETWATCH_BUS_KIND": "kafka",
                             "FLEETWATCH_BUS_BOOTSTRAP": kafka.address})
    sinks = alert_sinks(config)
    assert [s.name for s in sinks] == ["alertmanager", "webhook", "kafka"]
    assert sinks[2].topic == "fleetwatch.alerts"
    for s in sinks:
        s.close()
    none = dataclasses.replace(config, bus=dataclasses.replace(config.bus, alert_topic=""))
    assert [s.name for s in alert_sinks(none)] == ["alertmanager", "webhook"]


def test_sink_numbers_are_range_checked() -> None:
    with pytest.raises(ConfigError, match="alerts.sink_attempts"):
        load(None, env={"FLEETWATCH_ALERTS_SINK_ATTEMPTS": "0"})
    with pytest.raises(ConfigError, match="alerts.alertmanager_resend_s"):
        load(None, env={"FLEETWATCH_ALERTS_ALERTMANAGER_RESEND_S": "1e400"})


def test_the_configured_webhook_hears_the_processor(receiver: Receiver, tmp_path: Path) -> None:
    config = load(None, env={"FLEETWATCH_ALERTS_WEBHOOK_URL": receiver.url})
    store = tmp_store(tmp_path)
    notifier = open_notifier(config, store)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notify=notifier.send)
    processor.process([frame(100, [95])])
    notifier.close()
    assert [a["state"] for b in receiver.bodies for g in b["groups"] for a in g["alerts"]] == [
        "firing"]
    # and the store keeps the record of it: what a postmortem reads (`alerts`, `timeline`)
    assert [(n.sink, n.state, n.outcome) for n in store.notifications(0, 1e9)] == [
        ("webhook", "firing", "queued"), ("webhook", "firing", "sent")]
