"""The one place that turns configuration into implementations.

Which bus (in-process or Kafka), which store (SQLite or a line-protocol
server) and which detectors: chosen here from ``Config`` and nowhere else.
Backends with optional dependencies are imported only when chosen.
"""

from __future__ import annotations

from fleetwatch.config import BusConfig, DetectorsConfig, StoreConfig
from fleetwatch.models import Detector
from fleetwatch.models.registry import build
from fleetwatch.pipeline.bus import Consumer, Producer
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.store.base import Store


def open_store(config: StoreConfig, read_only: bool = False) -> Store:
    if config.kind == "sqlite":
        from fleetwatch.pipeline.store.sqlite import SqliteStore

        return SqliteStore(config.path, config.raw_retention_h, config.rollup_retention_d,
                           read_only=read_only)
    from fleetwatch.pipeline.store.lineproto import open_lineproto_store

    return open_lineproto_store(config)


def open_producer(config: BusConfig, memory: MemoryBus | None = None) -> Producer:
    if config.kind == "memory":
        if memory is None:
            raise ValueError("the in-process bus only works inside `fleetwatch up`; "
                             "set bus.kind = \"kafka\" for separate agents and processors")
        return memory.producer()
    from fleetwatch.pipeline.bus.kafka import KafkaProducer, kafka_security

    return KafkaProducer(config.bootstrap, security=kafka_security(config))


def open_consumer(config: BusConfig, memory: MemoryBus | None = None) -> Consumer:
    if config.kind == "memory":
        if memory is None:
            raise ValueError("the in-process bus only works inside `fleetwatch up`; "
                             "set bus.kind = \"kafka\" for separate agents and processors")
        return memory.consumer(config.topic, config.group)
    from fleetwatch.pipeline.bus.kafka import KafkaConsumer, kafka_security

    return KafkaConsumer(config.bootstrap, config.topic, config.group,
                         security=kafka_security(config))


def detectors(config: DetectorsConfig) -> list[Detector]:
    """The detectors ``[detectors] enabled`` names, tuned by that section (see models.registry)."""
    return build(config)
