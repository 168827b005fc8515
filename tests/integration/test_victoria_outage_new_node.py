"""VictoriaMetrics killed (-9), then a node never seen before starts sending: a GPU
that overheats on another node still reaches a real webhook within seconds, not once
VictoriaMetrics is back (the new node's stored boards cannot be read meanwhile)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.servers import victoria_metrics
from tests.sinks.conftest import Receiver, frame
from tests.sinks.test_alerts_during_store_outage import firing, wait_for


def test_a_new_node_during_a_victoriametrics_outage_holds_back_no_alert(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fleetwatch.pipeline.processor")
    vm = victoria_metrics(tmp_path).start()
    receiver = Receiver()
    store = VictoriaMetricsStore(f"http://{vm.address}")
    notifier = Notifier([WebhookSink(receiver.url)])
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)], notifier=notifier)
    bus = MemoryBus()
    producer = bus.producer()
    stop = threading.Event()
    worker = threading.Thread(target=processor.run,
                              args=(bus.consumer("frames", "g"), stop, 10, 3600.0))
    t0 = time.time() - 60
    worker.start()
    try:
        producer.send("frames", encode(frame(t0, [50.0, 50.0])), b"n1")
        wait_for(lambda: bus._committed.get(("frames", "g")) == 1)
        assert vm.proc is not None
        vm.proc.kill()
        vm.proc.wait(10)
        producer.send("frames", encode(frame(t0 + 10, [50.0, 50.0])), b"n1")
        wait_for(lambda: "store unavailable" in caplog.text)
        producer.send("frames", encode(frame(t0 + 15, [50.0, 50.0], node="n9")), b"n9")
        wait_for(lambda: "met for the first time (c/n9)" in caplog.text, 15)
        producer.send("frames", encode(frame(t0 + 20, [50.0, 96.0])), b"n1")
        sent = time.monotonic()
        wait_for(lambda: firing(receiver), 15)
        assert time.monotonic() - sent < 10  # not after the outage
        assert bus._committed[("frames", "g")] == 1  # nothing stored: nothing committed
        vm = victoria_metrics(tmp_path, port=vm.port).start()
        wait_for(lambda: bus._committed.get(("frames", "g")) == 4, 90)
        wait_for(lambda: [a.state for a in store.alerts()] == ["firing"], 30)
    finally:
        stop.set()
        worker.join(30)
        notifier.close()
        store.close()
        receiver.close()
        vm.stop()
    assert len(firing(receiver)) == 1
    assert processor.stats.frames == 4
