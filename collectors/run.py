"""``fleetwatch agent``: the node agent, and its one-shot debugging form."""

from __future__ import annotations

import logging
import threading
import time

from fleetwatch.collectors.agent import Agent
from fleetwatch.collectors.exporter import AgentHealth, Exporter, serve_metrics
from fleetwatch.collectors.node import node_source
from fleetwatch.config import Config, ConfigError
from fleetwatch.frame import Frame
from fleetwatch.service import needs_kafka, stop_on_signals
from fleetwatch.wiring import open_producer

log = logging.getLogger(__name__)

# Rates (CPU, NIC, InfiniBand, RAPL power) are differences of two readings.
ONCE_GAP_S = 1.0


def read_once(config: Config, fake_gpus: int | None = None) -> Frame:
    """One frame of this node, with rates over ONCE_GAP_S: for `agent --once`."""
    source = node_source(config, fake_gpus)
    try:
        source.frames(time.time())
        time.sleep(ONCE_GAP_S)
        (frame,) = source.frames(time.time())
        return frame
    finally:
        source.close()


class _LoopHealth:
    """The agent loop reports ticks here; sends are counted by the spool, once acknowledged."""

    def __init__(self, health: AgentHealth) -> None:
        self._health = health

    def sent(self, n: int) -> None:
        return None

    def tick(self, seconds: float) -> None:
        self._health.tick(seconds)


def run_agent(config: Config, fake_gpus: int | None = None,
              stop: threading.Event | None = None) -> int:
    from fleetwatch.collectors.spooling import SpoolingProducer

    if not needs_kafka(config, "agent"):
        return 2
    stop = stop_on_signals(stop)
    health = AgentHealth()
    source = node_source(config, fake_gpus, on_nvml_error=health.nvml_error)
    exporter = Exporter(config.node.node, health)
    server = serve_metrics(exporter, config.agent.metrics_host, config.agent.metrics_port)
    events = {"sent": health.sent, "replayed": health.sent, "spooled": health.spooled,
              "dropped": health.dropped}
    try:
        producer = SpoolingProducer(open_producer(config.bus), config.agent.spool_dir,
                                    int(config.agent.spool_max_mb * 2**20),
                                    on_event=lambda name, n: events.get(name, _ignore)(n))
    except OSError as exc:
        server.stop()
        source.close()
        raise ConfigError(f"agent.spool_dir = {config.agent.spool_dir!r} cannot be used: {exc}; "
                          "point it at a directory this user can write") from None
    agent = Agent(source, producer, config.bus.topic, _LoopHealth(health),
                  on_frames=lambda frames: exporter.update(frames[-1]))
    log.info("agent %s: every %gs to %s topic %s; /metrics on http://%s:%d; spool %s",
             config.node.node, config.agent.interval_s, config.bus.bootstrap, config.bus.topic,
             config.agent.metrics_host, server.port, config.agent.spool_dir)
    try:
        agent.run(config.agent.interval_s, stop)
    finally:
        producer.flush(10.0)
        producer.close()
        source.close()
        server.stop()
    log.info("agent stopped: %d frames sent, %d spooled and waiting", producer.sent,
             producer.backlog)
    return 0


def _ignore(n: int) -> None:
    return None
