"""``fleetwatch process``: one member of the processors' consumer group."""

from __future__ import annotations

import logging
import signal
import threading

from fleetwatch.config import Config
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.wiring import detectors, open_consumer, open_producer, open_store

log = logging.getLogger(__name__)


def run_processor(config: Config, stop: threading.Event | None = None) -> int:
    if config.bus.kind != "kafka":
        log.error("`fleetwatch process` consumes from Kafka: set bus.kind = \"kafka\" "
                  "(FLEETWATCH_BUS_KIND=kafka) and bus.bootstrap; `fleetwatch up` runs the "
                  "in-process bus instead")
        return 2
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    _ensure_topics(config)
    store = open_store(config.store)
    consumer = open_consumer(config.bus)
    dead = open_producer(config.bus)
    processor = Processor(store, detectors(config.alerts), dead, config.bus.dead_letter_topic)
    server = None
    if config.processor.metrics_port:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry()
        registry.register(ProcessorCollector(processor, consumer))
        server, _ = start_http_server(config.processor.metrics_port,
                                      config.processor.metrics_host, registry)
    log.info("processing %s from %s as group %s into %s store; /metrics on %s:%s",
             config.bus.topic, config.bus.bootstrap, config.bus.group, config.store.kind,
             config.processor.metrics_host, config.processor.metrics_port or "-")
    try:
        processor.run(consumer, stop, config.processor.max_batch,
                      config.processor.maintain_every_s)
    finally:
        consumer.close()
        dead.close()
        store.close()
        if server is not None:
            server.shutdown()
    log.info("stopped after %d frames, %d samples, %d dead letters", processor.stats.frames,
             processor.stats.points, processor.stats.dead_letters)
    return 0


def _ensure_topics(config: Config) -> None:
    """Create the frames and dead-letter topics if missing (a cluster may forbid it: then warn)."""
    from fleetwatch.pipeline.bus import BusError
    from fleetwatch.pipeline.bus.kafka import ensure_topic, kafka_security

    for topic in (config.bus.topic, config.bus.dead_letter_topic):
        try:
            n = ensure_topic(config.bus.bootstrap, topic, config.bus.partitions,
                             kafka_security(config.bus))
            log.info("topic %s has %d partitions", topic, n)
        except (BusError, OSError) as exc:
            log.warning("could not check or create topic %s (%s); create it with your Kafka "
                        "tools if it does not exist", topic, exc)
