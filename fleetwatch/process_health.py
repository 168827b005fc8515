"""What a processor says of itself before and beside its ``Processor``: whether it reaches
its bus, and the zeros of its counters while it cannot.

A member waiting for its broker (a wrong bootstrap in one host's environment file, a
firewall, DNS) used to answer /metrics with no fleetwatch series at all: ``up`` was 1 and
every shipped rule that sums the processors' series met an empty vector, so none fired.
Now, from the moment /metrics answers, a member exports ``fleetwatch_processor_bus_up``
(0 until it has a consumer, and while the topic watch cannot reach the broker) and, until
its processor is built, its counters at 0 (``WaitingCollector``): a processor that is up
but consumes nothing is what FleetwatchNothingConsumed and FleetwatchProcessorNoBus see.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fleetwatch.pipeline.health import info_family


class BusState:
    """Whether this member reaches its bus now, and why not; set by the threads that know
    (the start-up wait, the topic watch), read by a scrape or a readiness probe."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._lock = threading.Lock()
        self._up = False
        self._reason = f"waiting for Kafka at {bootstrap}"

    def set(self, up: bool, reason: str = "") -> None:
        with self._lock:
            self._up = up
            self._reason = "" if up else (reason or f"cannot reach Kafka at {self.bootstrap}")

    @property
    def up(self) -> bool:
        return self._up

    @property
    def reason(self) -> str:
        """Why the bus is not up ("" while it is)."""
        with self._lock:
            return self._reason


class BusCollector(Collector):
    """``fleetwatch_processor_bus_up``: 1 while this member reaches its broker."""

    def __init__(self, state: BusState) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("fleetwatch_processor_bus_up",
                                "1 while this member reaches its Kafka broker (it has a "
                                "consumer and the broker takes connections); 0 while it "
                                "waits for it at start or has lost it",
                                value=1.0 if self.state.up else 0.0)


class WaitingCollector(Collector):
    """A member's series before its processor exists (it waits for Kafka): the counters
    at 0, no partition owned, not paused, and its info, so that rules summing them see a
    processor that consumes nothing rather than no processor at all."""

    def __init__(self, info: dict[str, str]) -> None:
        self.info = dict(info)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield CounterMetricFamily("fleetwatch_processor_frames", "Frames decoded and stored",
                                  value=0)
        yield CounterMetricFamily("fleetwatch_processor_samples",
                                  "Samples (one metric of one device at one instant) stored",
                                  value=0)
        yield GaugeMetricFamily("fleetwatch_processor_partitions_owned",
                                "Partitions of the frames topic this member owns; 0: it "
                                "consumes nothing (a spare member, or stuck joining its group)",
                                value=0)
        yield GaugeMetricFamily("fleetwatch_processor_paused",
                                "1 while consumption is paused because the store is away",
                                value=0)
        if self.info:
            yield info_family(self.info)


class Readiness:
    """``/readyz``'s answer: "" when this member can do its work now, else why not (the
    bus away or not reached yet, no consumer yet, still joining its group, the store away
    so consumption is paused). A spare member that owns no partition is ready: idle."""

    def __init__(self, bus: BusState) -> None:
        self.bus = bus
        self.processor: Any = None  # the member's Processor, once built

    def __call__(self) -> str:
        if not self.bus.up:
            return self.bus.reason
        p = self.processor
        if p is None:
            return "starting: the processor is not built yet"
        if p.stats.paused:
            return "the store does not answer: consuming is paused until it does"
        if p.ownership.owned is None:
            return "joining the consumer group"
        return ""
