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

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fleetwatch.codec import encode
from fleetwatch.collectors.agent import Agent
from fleetwatch.collectors.agent_health import AgentHealth
from fleetwatch.collectors.exporter import Exporter, serve_metrics
from fleetwatch.collectors.node import check_node_names, node_source
from fleetwatch.collectors.sender import Sender
from fleetwatch.collectors.spool import SpoolBusy
from fleetwatch.collectors.spool_files import check_writable, make_private_dir
from fleetwatch.collectors.spooling import SpoolingProducer
from fleetwatch.config import Config, ConfigError
from fleetwatch.frame import AGENT_STOPPED, Frame, HostReading
from fleetwatch.service import bound, quiet_kafka_client, stop_on_signals
from fleetwatch.urls import http_url
from fleetwatch.wiring import ensure_topics, open_producer

log = logging.getLogger(__name__)

# Rates (CPU, NIC, InfiniBand, RAPL power) are differences of two readings.
ONCE_GAP_S = 1.0
# How long the sender waits for a topic check before it spools, once a send failed (the
# check of a broker that is down waits out its 5 s timeout). The first check, at start,
# is waited for: the broker is not known to be down, and the first frames wait for it.
TOPIC_WAIT_S = 0.5


class BackgroundCheck:
    """``check()`` run on a thread of its own: ``passed()`` starts one when none runs, waits
    for it (the first time until it ends, later at most ``wait_s``), and is true only for
    a check that passed and that no earlier ``passed()`` returned already (each new client
    of the producer needs its own, recent: a broker may have lost its topics since). A
    check that finishes after its caller gave up is kept for the next call, if it comes
    within ``fresh_s``."""

    def __init__(self, check: Callable[[], bool], wait_s: float, fresh_s: float = 5.0) -> None:
        self._check, self._wait_s, self._fresh_s = check, wait_s, fresh_s
        self._at = 0.0                     # when the last check ended (monotonic)
        self._first = True                 # the producer's first client: not after a failure
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._done.set()
        self._result: bool | None = None   # of the last check, until taken

    def passed(self) -> bool:
        with self._lock:
            if self._done.is_set() and time.monotonic() - self._at > self._fresh_s:
                self._result = None         # too old to vouch for the topics now
            if self._done.is_set() and self._result is None:
                self._done.clear()
                threading.Thread(target=self._run, name="fleetwatch-topic-check",
                                 daemon=True).start()
            done = self._done
            wait_s, self._first = (None if self._first else self._wait_s), False
        if not done.wait(wait_s):
            return False            # still checking: the caller spools meanwhile
        with self._lock:
            result, self._result = self._result, None
        return bool(result)

    def _run(self) -> None:
        try:
            result = self._check()
        except Exception:  # noqa: BLE001 - a failed check must not end the agent's sends
            log.exception("topic check failed")
            result = False
        with self._lock:
            self._result, self._at = result, time.monotonic()
            self._done.set()


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
        # Names every processor refuses: said before anything connects (the source checks
        # them again with the rack its node's label gives).
        check_node_names(config.node)
        self.config = config
        self.health = health = AgentHealth()
        self._topics_failed = False
        self._topic_check = BackgroundCheck(self._check_topics, TOPIC_WAIT_S)
        self.producer: SpoolingProducer | None = None
        self.sender: Sender | None = None
        if config.bus.kind == "kafka":
            # The spooling producer says once when the broker goes and once when it is back.
            quiet_kafka_client()
            spool_dir = Path(config.agent.spool_dir)
            try:
                # Before anything connects: a spool that cannot be written is a start-up
                # error, not frames lost later.
                make_private_dir(spool_dir)  # 0700, its parents too, whatever the umask
                check_writable(spool_dir)
                # Topics ensured before each new client, not auto-created by the broker
                # with its default partition count: agents often start before processors.
                producer = open_producer(config.bus, prepare=self._ensure_topics,
                                         auto_create_topics=False)
                self.producer = SpoolingProducer(
                    producer, spool_dir,
                    int(config.agent.spool_max_mb * 2**20), on_event=health.spool_event)
            except SpoolBusy as exc:  # not a configuration error: another agent runs
                raise SpoolBusy(f"agent.spool_dir = {config.agent.spool_dir!r}: {exc}") from None
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
        try:  # port 0: no /metrics (as processor.metrics_port = 0)
            self.server = None if not port else bound(
                host, port, "agent.metrics_port", lambda: serve_metrics(self.exporter, host, port))
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
        cluster's tools, must make them; a check passes where they exist).

        The check runs on its own thread (``BackgroundCheck``): the sender waits for it
        at most ``TOPIC_WAIT_S``, then spools. While the broker is down each check waits
        out its timeout; frames taken meanwhile go to disk, not the sender's memory,
        where a SIGKILL or a crash of the node would lose them."""
        return self._topic_check.passed()

    def _check_topics(self) -> bool:
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
        log.info("agent %s/%s: every %gs %s; /metrics %s", config.node.cluster,
                 config.node.node,
                 config.agent.interval_s, where,
                 "off (agent.metrics_port = 0)" if self.server is None else
                 "on " + http_url(config.agent.metrics_host, self.server.port, "/metrics"))
        open_bus = config.bus.open_to_anyone()
        if open_bus is not None and self.sender is not None:
            log.warning("%s", open_bus)
        if self.sender is not None:
            self.sender.start()
        try:
            self.agent.run(config.agent.interval_s, stop)
            if getattr(stop, "cause", ""):  # a signal asked (stop_on_signals): a clean stop
                self._say_stopped()
        finally:
            self.close()
        return 0

    def _say_stopped(self) -> None:
        """Send a last frame, sampled now, that says the agent stopped cleanly (``AGENT_STOPPED``),
        when a signal stopped it (SIGTERM, SIGINT, SIGHUP): a node scaled down or stopped with
        systemctl is recorded as stopped, not paged as silent. An agent run in-process and
        stopped by its caller's event sends none; nor does a crash, SIGKILL or power loss:
        that node is paged as before. An older processor leaves the unknown metric out
        (``codec``) and pages as before."""
        if self.sender is None:
            return
        try:
            frames = self.source.frames(time.time())
        except Exception:  # noqa: BLE001 - the stop goes on; the node is paged as silent
            log.exception("the agent's last frame (stopped) could not be read")
            return
        for f in frames:
            host = HostReading({**f.host.metrics, AGENT_STOPPED: 1.0}, f.host.ports)
            self.sender.put(self.config.bus.topic, encode(dataclasses.replace(f, host=host)),
                            f.node.encode())
        log.info("agent stopping: its last frame says so (the node is not paged silent)")

    def close(self) -> None:
        self.source.close()
        if self.sender is not None and self.producer is not None:
            self.sender.close()
            self.producer.flush(10.0)
            self.producer.close()
            log.info("agent stopped: %d frames sent, %d spooled and waiting, %d dropped",
                     self.producer.sent + self.producer.replayed, self.producer.backlog,
                     self.producer.dropped + self.sender.dropped)
        if self.server is not None:
            self.server.stop()


def run_agent(config: Config, fake_gpus: int | None = None,
              stop: threading.Event | None = None, fake_faults: str | None = None) -> int:
    """``fleetwatch agent``: run until SIGTERM/SIGINT (or ``stop``)."""
    stop = stop_on_signals(stop)
    return AgentService(config, fake_gpus, fake_faults).run(stop)
