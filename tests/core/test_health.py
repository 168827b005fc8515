from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.codec import encode
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore


def test_processor_health_metrics(tmp_path: Path) -> None:
    bus = MemoryBus()
    producer = bus.producer()
    sim = FleetSim(SimParams(nodes=2, gpus=1), 1_763_800_000.0)
    sim.step()
    for f in sim.frames():
        producer.send("t", encode(f))
    producer.send("t", b"\xc1")  # never valid MessagePack
    consumer = bus.consumer("t", "g")
    processor = Processor(SqliteStore(tmp_path / "s.db"))
    processor.handle(consumer.poll(2))  # one message left behind: lag 1
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, consumer))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(generate_latest(registry).decode())
               for s in fam.samples}
    assert samples[("fleetwatch_processor_frames_total", ())] == 2
    assert samples[("fleetwatch_processor_samples_total", ())] == 2 * (32 + 5)
    assert samples[("fleetwatch_processor_consumer_lag", ())] == 1
    assert samples[("fleetwatch_processor_paused", ())] == 0
    processor.handle(consumer.poll(10))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(generate_latest(registry).decode())
               for s in fam.samples}
    assert samples[("fleetwatch_processor_dead_letters_total", (("field", "frame"),))] == 1
    assert samples[("fleetwatch_processor_consumer_lag", ())] == 0
