"""``fleetwatch agent``: the node agent, and its one-shot debugging form.

With ``bus.kind = "kafka"`` it samples on its own clock and publishes through a
sender thread and the on-disk spool; with the in-process bus (the default) it
sends nothing and only serves ``/metrics``, as a drop-in for dcgm-exporter.

Agents usually start before any processor (the README's install order), so before its
producer connects the agent ensures the topics as the processor does
(``wiring.ensure_topics``, ``bus.partitions``), and its producer never lets the broker
auto-create one with the broker's default partition count.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from fleetwatch.collectors.agent import Agent
from fleetwatch.collectors.exporter import AgentHealth, Exporter, serve_metrics
from fleetwatch.collectors.node import node_source
from fleetwatch.collectors.sender import Sender
from fleetwatch.collectors.spool import check_writable
from fleetwatch.collectors.spooling import SpoolingProducer
from fleetwatch.config import Config, ConfigError
from fleetwatch.frame import Frame
from fleetwatch.service import bound, quiet_kafka_client, stop_on_signals
from fleetwatch.urls import http_url
from fleetwatch.wiring import ensure_topics, open_producer

log = logging.getLogger(__name__)

# Rates (CPU, NIC, InfiniBand, RAPL power) are differences of two readings.
ONCE_GAP_S = 1.0


def read_once(config: Config, fake_gpus: int | None = None,
              fake_faults: str | None = None) -> Frame:
    """One frame of this node, with rates over ONCE_GAP_S: for `agent --once`."""
    source = node_source(config, fake_gpus, fake_faults=fake_faults)
    try:
        source.frames(time.time())
        time.sleep(ONCE_GAP_S)
        (frame,) = source.frames(time.time())
        return frame
    finally:
        source.close()


class AgentService:
    """The running agent: its source, loop, ``/metrics`` and (Kafka only) sender and spool."""

    def __init__(self, config: Config, fake_gpus: int | None = None,
                 fake_faults: str | None = None) -> None:
        self.config = config
        self.health = health = AgentHealth()
        self._topics_failed = False
        self.producer: SpoolingProducer | None = None
        self.sender: Sender | None = None
        if config.bus.kind == "kafka":
            # The spooling producer says once when the broker goes and once when it is back.
            quiet_kafka_client()
            spool_dir = Path(config.agent.spool_dir)
            try:
                # Before anything connects: a spool that cannot be written is a start-up
                # error, not frames lost later.
                spool_dir.mkdir(parents=True, exist_ok=True)
                check_writable(spool_dir)
                # Topics ensured before each new client, not auto-created by the broker
                # with its default partition count: agents often start before processors.
                producer = open_producer(config.bus, prepare=self._ensure_topics,
                                         auto_create_topics=False)
                self.producer = SpoolingProducer(
                    producer, spool_dir,
                    int(config.agent.spool_max_mb * 2**20), on_event=health.spool_event)
            except OSError as exc:
                raise ConfigError(
                    f"agent.spool_dir = {config.agent.spool_dir!r} cannot be used: {exc}; "
                    "point it at a directory this user can write") from None
            self.sender = Sender(self.producer, on_dropped=health.dropped)
            health.watch(self.producer, self.sender)
        try:
            self.source = node_source(config, fake_gpus, on_nvml_error=health.nvml_error,
                                      on_dropped=health.input_dropped,
                                      on_gpu_state=health.gpu_state,
                                      fake_faults=fake_faults)
        except BaseException:
            if self.producer is not None:
                self.producer.close()
            raise
        self.exporter = Exporter(config.node.node, health)
        host, port = config.agent.metrics_host, config.agent.metrics_port
        try:
            self.server = bound(host, port, "agent.metrics_port",
                                lambda: serve_metrics(self.exporter, host, port))
        except BaseException:
            self.source.close()
            if self.producer is not None:
                self.producer.close()
            raise
        self.agent = Agent(self.source, None, config.bus.topic, health,
                           on_frames=self._show,
                           sender=self.sender)
        health.agent = self.agent

    def _ensure_topics(self) -> bool:
        """The topics made with ``bus.partitions`` if the broker lacks them (the processor's
        ``ensure_topics``); true once each was checked. Until then the producer makes no
        client and the frames stay spooled: a client's first send to an emptied broker
        would create a topic with the broker's default partition count. A failure is said
        once until a check succeeds: the broker may be away (the spool says so) or the
        topics missing where this agent may not create them (a processor, or the
        cluster's tools, must make them; a check passes where they exist)."""
        ok = ensure_topics(self.config.bus, quiet=True, timeout_s=5.0,
                           failed_level=logging.DEBUG if self._topics_failed else logging.WARNING)
        self._topics_failed = not ok
        return ok

    def _show(self, frames: list[Frame]) -> None:
        self.exporter.update(frames[-1], getattr(self.source, "mig", None))

    def run(self, stop: threading.Event) -> int:
        config = self.config
        where = (f"to {config.bus.bootstrap} topic {config.bus.topic}, spool "
                 f"{config.agent.spool_dir}" if self.sender is not None
                 else "sending nothing (bus.kind = \"memory\": /metrics only)")
        log.info("agent %s: every %gs %s; /metrics on %s", config.node.node,
                 config.agent.interval_s, where,
                 http_url(config.agent.metrics_host, self.server.port, "/metrics"))
        if self.sender is not None:
            self.sender.start()
        try:
            self.agent.run(config.agent.interval_s, stop)
        finally:
            self.close()
        return 0

    def close(self) -> None:
        self.source.close()
        if self.sender is not None and self.producer is not None:
            self.sender.close()
            self.producer.flush(10.0)
            self.producer.close()
            log.info("agent stopped: %d frames sent, %d spooled and waiting, %d dropped",
                     self.producer.sent + self.producer.replayed, self.producer.backlog,
                     self.producer.dropped + self.sender.dropped)
        self.server.stop()


def run_agent(config: Config, fake_gpus: int | None = None,
              stop: threading.Event | None = None, fake_faults: str | None = None) -> int:
    """``fleetwatch agent``: run until SIGTERM/SIGINT (or ``stop``)."""
    stop = stop_on_signals(stop)
    return AgentService(config, fake_gpus, fake_faults).run(stop)
