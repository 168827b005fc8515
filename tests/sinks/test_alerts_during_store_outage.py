"""Alerts do not wait for the store: while its writes fail, a hot GPU is still sent to
a real webhook (a local HTTP server) at once; its frames and its alert are stored, and
its offset committed, only once the store is back, and it is judged (sent) once."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.sinks.conftest import Receiver, frame, on_memory_bus
from tests.store.helpers import stored

TOPIC = "frames"


class DownStore(SqliteStore):
    """Every write fails while ``down`` is set, as a VictoriaMetrics killed would."""

    down = threading.Event()
    refused = 0

    def _away(self) -> None:
        if self.down.is_set():
            DownStore.refused += 1
            raise StoreError("cannot write to http://127.0.0.1:9/ (connection refused)")

    def write(self, frames):  # type: ignore[override]
        self._away()
        return super().write(frames)

    def write_alerts(self, alerts):  # type: ignore[override]
        self._away()
        super().write_alerts(alerts)

    def write_events(self, events):  # type: ignore[override]
        self._away()
        super().write_events(events)


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def firing(receiver: Receiver) -> list[dict]:
    return [a for body in receiver.bodies for g in body["groups"]  # type: ignore[index]
            for a in g["alerts"] if a["state"] == "firing"]


def test_a_hot_gpu_is_sent_while_the_store_is_down(tmp_path: Path, receiver: Receiver,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "fleetwatch.pipeline.processor")
    db = tmp_path / "s.db"
    store = DownStore(db)
    notifier = Notifier([WebhookSink(receiver.url)])
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)], notifier=notifier)
    t0 = time.time() - 60
    bus, producer, stop, worker = on_memory_bus(processor, TOPIC)
    try:
        producer.send(TOPIC, encode(frame(t0, [50.0, 50.0])), b"n1")
        wait_for(lambda: stored(db) > 0 and bus._committed.get((TOPIC, "g")) == 1)
        DownStore.down.set()
        producer.send(TOPIC, encode(frame(t0 + 10, [50.0, 50.0])), b"n1")
        wait_for(lambda: DownStore.refused >= 2)  # the store is away, retried with backoff
        producer.send(TOPIC, encode(frame(t0 + 20, [50.0, 96.0])), b"n1")
        sent = time.monotonic()
        wait_for(lambda: firing(receiver), 10)
        assert time.monotonic() - sent < 5  # on time, not after the outage
        (alert,) = firing(receiver)
        assert alert["rule"] == "gpu_temp_high" and alert["labels"]["device"] == "gpu1"
        # Nothing of the outage is stored or committed yet.
        assert store.alerts() == [] and bus._committed[(TOPIC, "g")] == 1
        assert "alerts are still judged and sent" in caplog.text
        DownStore.down.clear()
        wait_for(lambda: bus._committed.get((TOPIC, "g")) == 3)
        wait_for(lambda: [a.state for a in store.alerts()] == ["firing"])
    finally:
        stop.set()
        worker.join(30)
        notifier.close()
    assert not worker.is_alive()
    assert processor.stats.frames == 3
    assert len(firing(receiver)) == 1  # judged once, not again when it was stored
    (a,) = store.alerts()
    assert a.started_ts == t0 + 20


class DeadAtStart(DownStore):
    """Reads fail too: a processor that starts while the store is away cannot read its
    partitions' open alerts, so it cannot judge, and must not say that it does."""

    def alerts(self, *args, **kwargs):  # type: ignore[override]
        self._away()
        return super().alerts(*args, **kwargs)

    def latest(self, *args, **kwargs):  # type: ignore[override]
        self._away()
        return super().latest(*args, **kwargs)


def test_a_processor_started_while_the_store_is_away_says_it_does_not_judge_yet(
        tmp_path: Path, receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "fleetwatch.pipeline.processor")
    db = tmp_path / "s.db"
    store = DeadAtStart(db)
    DownStore.down.set()
    DownStore.refused = 0
    notifier = Notifier([WebhookSink(receiver.url)])
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)], notifier=notifier)
    bus, producer, stop, worker = on_memory_bus(processor, TOPIC)
    try:
        producer.send(TOPIC, encode(frame(time.time() - 30, [50.0, 96.0])), b"n1")
        wait_for(lambda: DownStore.refused >= 3)
        said = [r.getMessage() for r in caplog.records if "store unavailable" in r.getMessage()]
        assert said and all("NOT judged yet" in m for m in said), said
        assert "alerts are still judged" not in caplog.text and not firing(receiver)
        DownStore.down.clear()
        wait_for(lambda: firing(receiver), 30)  # judged once the store is back
    finally:
        DownStore.down.clear()
        stop.set()
        worker.join(30)
        notifier.close()
    assert not worker.is_alive()
    assert [a.rule for a in store.alerts()] == ["gpu_temp_high"]
