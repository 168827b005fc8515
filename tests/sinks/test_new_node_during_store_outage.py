"""A node met for the first time while the store is away (an agent restarted, a node
added during a VictoriaMetrics outage) holds back nobody's alerts: its stored GPU boards
cannot be read, so it is judged without them, and a hot GPU on another node still
reaches a real webhook at once. Once the store is back, the new node's boards are
compared with those it last stored (a board swapped meanwhile is a ``gpu_replaced``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store import StoreError
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.sinks.conftest import Receiver, frame
from tests.sinks.test_alerts_during_store_outage import firing, wait_for

TOPIC = "frames"


class AwayStore(SqliteStore):
    """Every write and every read of events fails while ``down`` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.down = threading.Event()

    def _away(self) -> None:
        if self.down.is_set():
            raise StoreError("cannot reach http://127.0.0.1:9/ (connection refused)")

    def write(self, frames):  # type: ignore[override]
        self._away()
        return super().write(frames)

    def write_alerts(self, alerts):  # type: ignore[override]
        self._away()
        super().write_alerts(alerts)

    def write_events(self, events):  # type: ignore[override]
        self._away()
        super().write_events(events)

    def events(self, *args, **kwargs):  # type: ignore[override]
        self._away()
        return super().events(*args, **kwargs)


def test_a_new_node_during_a_store_outage_holds_back_no_alert(tmp_path: Path,
                                                               receiver: Receiver) -> None:
    store = AwayStore(tmp_path / "s.db")
    t0 = time.time() - 60
    # n2 was watched before: its slot 0 held another board then.
    store.write_events([Event(t0 - 3600, "gpu_identity", "c", "r1", "n2", "gpu0",
                              value="GPU-OLD", text="serial 1")])
    notifier = Notifier([WebhookSink(receiver.url)])
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)], notifier=notifier)
    bus = MemoryBus()
    consumer = bus.consumer(TOPIC, "g")
    stop = threading.Event()
    worker = threading.Thread(target=processor.run, args=(consumer, stop, 10, 3600.0))
    producer = bus.producer()
    worker.start()
    try:
        producer.send(TOPIC, encode(frame(t0, [50.0, 50.0])), b"n1")
        wait_for(lambda: bus._committed.get((TOPIC, "g")) == 1)
        store.down.set()
        producer.send(TOPIC, encode(frame(t0 + 10, [50.0, 50.0])), b"n1")
        wait_for(lambda: processor.stats.store_errors >= 1)
        producer.send(TOPIC, encode(frame(t0 + 15, [50.0, 50.0], node="n2")), b"n2")
        time.sleep(0.5)
        producer.send(TOPIC, encode(frame(t0 + 20, [50.0, 96.0])), b"n1")
        sent = time.monotonic()
        wait_for(lambda: firing(receiver), 10)
        assert time.monotonic() - sent < 5  # on time, not after the outage
        (alert,) = firing(receiver)
        assert alert["labels"]["node"] == "n1" and alert["labels"]["device"] == "gpu1"
        # How late it went out is measured from its frame (stamped 40 s ago here): what
        # Alertmanager's startsAt (the frame's time) cannot show.
        families = {m.name: m for m in ProcessorCollector(processor, consumer).collect()}
        (delay,) = families["fleetwatch_processor_alert_delay_seconds"].samples
        assert delay.value == pytest.approx(time.time() - (t0 + 20), abs=5)
        assert store.alerts() == [] and bus._committed[(TOPIC, "g")] == 1
        store.down.clear()
        wait_for(lambda: bus._committed.get((TOPIC, "g")) == 4)
        wait_for(lambda: [a.state for a in store.alerts()] == ["firing"])
        wait_for(lambda: store.events(t0 - 7200, t0 + 60, node="n2", kinds=["gpu_replaced"]))
    finally:
        stop.set()
        worker.join(30)
        notifier.close()
    assert not worker.is_alive()
    assert processor.stats.frames == 4
    assert len(firing(receiver)) == 1  # judged once
    (swap,) = store.events(t0 - 7200, t0 + 60, node="n2", kinds=["gpu_replaced"])
    assert (swap.device, swap.value, swap.ts) == ("gpu0", "GPU-0", t0 + 15)
    assert "GPU-OLD" in swap.text
    # Slot 1 had no stored board: met for the first time, named, no swap.
    assert {e.device for e in store.events(t0, t0 + 60, node="n2", kinds=["gpu_identity"])} \
        == {"gpu0", "gpu1"}
