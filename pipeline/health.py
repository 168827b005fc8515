"""The processor's own health as Prometheus metrics.

A custom collector reads the processor's counters and the consumer's lag at
scrape time, so nothing on the hot path touches prometheus-client.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fleetwatch.pipeline.bus import Consumer
from fleetwatch.pipeline.processor import Processor


class ProcessorCollector(Collector):
    def __init__(self, processor: Processor, consumer: Consumer) -> None:
        self.processor = processor
        self.consumer = consumer

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self.processor.stats
        yield CounterMetricFamily("fleetwatch_processor_frames", "Frames decoded and stored",
                                  value=s.frames)
        yield CounterMetricFamily("fleetwatch_processor_samples",
                                  "Samples (one metric of one device at one instant) stored",
                                  value=s.points)
        dead = CounterMetricFamily("fleetwatch_processor_dead_letters",
                                   "Messages dead-lettered, by the field at fault "
                                   "(store: refused by the store)",
                                   labels=["field"])
        for field, n in sorted(s.by_reason.items()):
            dead.add_metric([field], n)
        yield dead
        yield CounterMetricFamily("fleetwatch_processor_dead_letters_lost",
                                  "Dead letters not delivered to the dead-letter topic "
                                  "(unreachable for a minute); each logged with its offset",
                                  value=s.dead_letters_lost)
        yield CounterMetricFamily("fleetwatch_processor_store_rejected",
                                  "Frames the store refused for good, dead-lettered",
                                  value=s.store_rejected)
        yield CounterMetricFamily("fleetwatch_processor_errors",
                                  "Unexpected errors (bugs), each logged with its traceback",
                                  value=s.errors)
        yield CounterMetricFamily("fleetwatch_processor_store_errors",
                                  "Store writes that failed and were retried", value=s.store_errors)
        yield CounterMetricFamily("fleetwatch_processor_alert_changes",
                                  "Alert state changes written", value=s.alerts_changed)
        yield GaugeMetricFamily("fleetwatch_processor_batch_seconds",
                                "Time to decode, store and evaluate the last batch",
                                value=s.last_batch_s)
        yield GaugeMetricFamily("fleetwatch_processor_paused",
                                "1 while consumption is paused because the store is away",
                                value=1.0 if s.paused else 0.0)
        lag = self.consumer.lag()
        if lag is not None:
            yield GaugeMetricFamily("fleetwatch_processor_consumer_lag",
                                    "Messages in this member's partitions not yet consumed",
                                    value=lag)
