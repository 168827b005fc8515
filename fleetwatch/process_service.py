"""``fleetwatch process``: one member of the processors' consumer group, or N of them.

The app side of the processor (it lived in ``pipeline/run.py``, which made a
stage import the composition root that imports it): it wires config into a
``Processor`` and runs it until SIGTERM or SIGINT. On either, the member
finishes the batches in hand (stores, evaluates, commits them, sends their
dead letters) within ``processor.stop_timeout_s`` in all (``process_stop``) and logs
one line that says so, naming what it had to abandon.

A broker that cannot be reached is waited for, as the agent waits for it: at
start each member says once an attempt that it cannot reach Kafka and tries
again with backoff (``service.reach_kafka``), and SIGTERM then exits 0 at
once; while running, the topic watch says when the broker goes and when it
is back. kafka-python's own lines are silenced (``quiet_kafka_client``).

With ``processor.workers = N`` (``--workers N``) above 1, this process only
supervises: it starts N members as child processes (multiprocessing
``spawn``: a fresh interpreter each, with its own GIL, so each can use a
core), each with its own consumer, store client and processor. The group's
partition split gives each its own partitions, exactly as for N separate
``fleetwatch process`` instances, so nothing else changes: commits, replays
and dead letters are per member. The parent restarts a child that dies (with
backoff if it keeps dying), forwards SIGTERM/SIGINT as SIGTERM to every
child and waits for them; a child whose parent disappears stops by itself.
Child i serves its own /metrics on ``metrics_port + i``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

from fleetwatch.config import Config, ConfigError
from fleetwatch.pipeline.bus import BusBroken
from fleetwatch.pipeline.group_check import GroupCheck
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.model_metrics import ModelCollector
from fleetwatch.pipeline.out_of_memory import OutOfMemory
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import StoreError, StoreLost
from fleetwatch.process_health import BusCollector, BusState, Readiness, WaitingCollector
from fleetwatch.process_stop import StopBudget, leave
from fleetwatch.service import (
    PortInUse,
    Stop,
    bound,
    kafka_unreachable,
    needs_kafka,
    quiet_kafka_client,
    reach_kafka,
    stop_on_signals,
)
from fleetwatch.store_switch import left_behind
from fleetwatch.storelock import StorePathError, check_store_path
from fleetwatch.wiring import (
    deployment_clusters,
    detectors,
    energy_integrator,
    ensure_topics,
    learned_detectors,
    linked,
    member_settings,
    open_consumer,
    open_notifier,
    open_producer,
    open_store,
    processor_info,
)

log = logging.getLogger(__name__)


def run_processor(config: Config, stop: threading.Event | None = None) -> int:
    """``fleetwatch process``: until SIGTERM/SIGINT (or ``stop``); returns the exit status.

    A broker that cannot be reached at start is waited for (``reach_kafka``: one line
    per attempt, with backoff); a stop request while waiting exits 0 at once.
    """
    if not needs_kafka(config, "process"):
        return 2
    if config.store.kind != "sqlite":  # the URL's credentials against store.token, at once
        from fleetwatch.pipeline.store.lpwriter import ServerURL

        ServerURL.parse(config.store.url, config.store.token.reveal())
    else:  # at once, before Kafka is waited for: not a traceback from SQLite later
        try:
            check_store_path(config.store.path, "store.path (FLEETWATCH_STORE_PATH)")
        except StorePathError as exc:
            raise ConfigError(str(exc)) from None
    quiet_kafka_client()
    stop = stop_on_signals(stop)
    if config.processor.workers > 1:
        if not _parent_topics_ready(config, stop):
            return _stopped_waiting(config, stop)
        return _supervise(config, stop)
    return _member(config, stop, topics=True)


def _parent_topics_ready(config: Config, stop: threading.Event) -> bool:
    """The supervisor's wait for Kafka, with /metrics on ``metrics_port`` meanwhile (the
    bus down, the counters at 0: ``process_health``), handed to worker 0 once it is over."""
    bus = BusState(config.bus.bootstrap)
    server, registry = _metrics(config, None, Readiness(bus))
    if registry is not None:
        registry.register(BusCollector(bus))
        registry.register(WaitingCollector(processor_info(config)))
    try:
        return _topics_ready(config, stop, bus)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()  # the port is worker 0's


def _topics_ready(config: Config, stop: threading.Event, bus: BusState) -> bool:
    """Kafka reached and the topics checked (the watch thread started); False if stopped
    first. Before the consumer: its metadata request would create a missing topic with
    the broker's default partition count instead of ``bus.partitions``."""
    if reach_kafka(config.bus.bootstrap, stop) is None:
        return False
    _ensure_topics(config)
    _start_watch(config, stop, bus, ensure=True)
    return True


def _start_watch(config: Config, stop: threading.Event, bus: BusState, ensure: bool) -> None:
    threading.Thread(target=_watch_topics, args=(config, stop, bus, ensure),
                     name="topic-watch", daemon=True).start()


def _stopped_waiting(config: Config, stop: threading.Event) -> int:
    log.info("stopped%s while waiting for Kafka at %s: nothing was consumed",
             f" on {stop.cause}" if isinstance(stop, Stop) and stop.cause else "",
             config.bus.bootstrap)
    return 0


def _metrics(config: Config, index: int | None, ready: Callable[[], str]) -> tuple[Any, Any]:
    """The metrics port (/metrics, /healthz, /readyz: ``health_http``), started before
    anything connects (a port that is taken is a start-up error, said at once), and its
    registry, empty until the processor is built."""
    if not config.processor.metrics_port:
        return None, None
    from prometheus_client import CollectorRegistry

    from fleetwatch.health_http import serve

    registry = CollectorRegistry()
    host, port = config.processor.metrics_host, config.processor.metrics_port
    setting = ("processor.metrics_port" if index is None else
               f"processor.metrics_port (+ {index} for worker {index})")
    server = bound(host, port, setting, lambda: serve(host, port, registry, ready))
    return server, registry


def _check_server(store: object) -> None:
    """The store server's own set-up, once at start (``InfluxQLStore.check_server``): a
    retention too short refuses to start (``StoreMisconfigured``); a server away now is
    not an error (the processor waits for it)."""
    check = getattr(store, "check_server", None)
    if not callable(check):
        return
    try:
        check()
    except StoreError as exc:
        log.warning("cannot check the store server's set-up yet (%s); frames are held "
                    "until it answers", exc)


def _member(config: Config, stop: threading.Event, topics: bool = False,
            index: int | None = None) -> int:
    """One group member until ``stop``; with ``topics``, it checks the topics first (and
    watches them) as a lone processor must; ``index`` is a worker's, for messages."""
    with contextlib.ExitStack() as held:
        bus = BusState(config.bus.bootstrap)
        ready = Readiness(bus)
        server, registry = _metrics(config, index, ready)
        if server is not None:
            held.callback(server.server_close)
            held.callback(server.shutdown)
        waiting = WaitingCollector(processor_info(config))
        if registry is not None:  # from the start: a member waiting for Kafka is seen
            registry.register(BusCollector(bus))
            registry.register(waiting)
        store = open_store(config.store)
        held.callback(store.close)
        _check_server(store)
        behind = left_behind(config, store, time.time())
        if behind:
            log.warning("%s", behind)
        if topics and not _topics_ready(config, stop, bus):
            return _stopped_waiting(config, stop)
        check = GroupCheck(config.bus.group, member_settings(config))
        consumer = reach_kafka(config.bus.bootstrap, stop,
                               lambda: open_consumer(config.bus, check=check))
        if consumer is None:
            return _stopped_waiting(config, stop)
        held.callback(consumer.close)
        bus.set(True)
        if not topics:  # a worker: the supervisor checks the topics; it watches the bus
            _start_watch(config, stop, bus, ensure=False)
        dead = open_producer(config.bus)
        held.callback(dead.close)  # flushes what is still queued
        notifier = open_notifier(config, store)
        budget = StopBudget(stop, config.processor.stop_timeout_s)
        held.callback(budget.close_sinks, notifier)
        rules = linked([*detectors(config.detectors), *learned_detectors(config.models)])
        processor = Processor(store, rules, dead, config.bus.dead_letter_topic,
                              notifier=notifier, energy=energy_integrator(config.energy, store),
                              keep_firing_s=config.alerts.keep_firing_s,
                              max_clock_ahead_s=config.processor.max_clock_ahead_s,
                              clusters=deployment_clusters(config))
        ready.processor = processor
        if registry is not None:
            registry.unregister(waiting)  # the same names, now counted
            registry.register(ProcessorCollector(processor, consumer, notifier,
                                                 processor_info(config), check))
            registry.register(ModelCollector(processor.detectors))
        log.info("processing %s from %s as group %s into %s store; /metrics on %s:%s",
                 config.bus.topic, config.bus.bootstrap, config.bus.group, config.store.kind,
                 config.processor.metrics_host, config.processor.metrics_port or "-")
        open_bus = config.bus.open_to_anyone()
        if open_bus is not None:
            log.warning("%s", open_bus)
        try:
            processor.run(consumer, stop, config.processor.max_batch,
                          config.processor.maintain_every_s, drain_s=budget.drain_s)
        except OutOfMemory as exc:  # one line; the supervisor restarts it
            log.critical("%s", exc)
            return EXIT_OUT_OF_MEMORY
        except StoreLost as exc:  # its batches are not committed: replayed once fixed
            log.critical("%s; the batches in hand were not committed and are replayed", exc)
            return EXIT_STORE_LOST
        except BusBroken as exc:  # what to correct; a restart alone does not mend it
            log.critical("%s", exc)
            return EXIT_BUS_BROKEN
        budget.flush(processor)  # the last counts of open alerts, before the store closes
    finished, left = processor.drained
    s = processor.stats
    log.info("stopped%s: finished the %d batches in hand (stored, committed)%s; %d frames, "
             "%d samples, %d dead letters in all%s",
             f" on {stop.cause}" if isinstance(stop, Stop) and stop.cause else "", finished,
             f", {left} not finished, replayed by the next owner" if left else "",
             s.frames, s.points, s.dead_letters, budget.summary())
    return 0


# How often the topics are checked while running: a broker that lost its data may get
# them again from a client's send (agents ensure them first; an older agent, or
# another producer, does not) with its default partition count.
_TOPIC_CHECK_S = 30.0


def _watch_topics(config: Config, stop: threading.Event, bus: BusState,
                  ensure: bool = True) -> None:
    """Every ``_TOPIC_CHECK_S``: the topics checked again (with ``ensure``), or, while
    Kafka cannot be reached, one line when it goes and one when it is back (kafka-python's
    own lines are silenced: ``quiet_kafka_client``), without three admin clients timing
    out; ``bus`` follows it (``fleetwatch_processor_bus_up``)."""
    bootstrap, away = config.bus.bootstrap, False
    while not stop.wait(_TOPIC_CHECK_S):
        reason = kafka_unreachable(bootstrap)
        if reason is not None:
            if not away:
                log.warning("cannot reach Kafka at %s (%s); consuming resumes when it is back",
                            bootstrap, reason)
            away = True
            bus.set(False, f"cannot reach Kafka at {bootstrap} ({reason})")
            continue
        if away:
            log.info("Kafka at %s can be reached again", bootstrap)
            away = False
        bus.set(True)
        if ensure:
            _ensure_topics(config, quiet=True)


def _ensure_topics(config: Config, quiet: bool = False) -> None:
    """The topics created as configured, or completed (``wiring.ensure_topics``)."""
    ensure_topics(config.bus, quiet)


# The processor ran out of memory (``out_of_memory.OutOfMemory``): non-zero, so that
# systemd (Restart=on-failure) or Kubernetes restarts it.
EXIT_OUT_OF_MEMORY = 1
# The SQLite store's file left its path while the processor wrote it (``StoreLost``).
EXIT_STORE_LOST = 1
# The bus client cannot fetch (``pipeline.bus.BusBroken``): non-zero, the cause logged.
EXIT_BUS_BROKEN = 1

# A child that dies sooner than this after its start is restarted after a
# growing delay, so that a member that cannot start does not spin.
_HEALTHY_S = 30.0
_MAX_RESTART_DELAY_S = 30.0
# A worker stops within processor.stop_timeout_s; it is killed this much later.
_STOP_MARGIN_S = 3.0


@dataclasses.dataclass
class _Child:
    index: int
    process: BaseProcess | None = None
    started: float = 0.0
    restart_at: float = 0.0
    failures: int = 0


def _supervise(config: Config, stop: threading.Event) -> int:
    """Run ``processor.workers`` members as child processes until ``stop``; restart the dead."""
    ctx = multiprocessing.get_context("spawn")
    n = config.processor.workers
    level = logging.getLogger().getEffectiveLevel()
    children = [_Child(i) for i in range(n)]
    log.info("supervising %d processor workers (group %s); /metrics on %s", n,
             config.bus.group, f"ports {config.processor.metrics_port}.."
             f"{config.processor.metrics_port + n - 1}" if config.processor.metrics_port
             else "-")
    while not stop.is_set():
        now = time.monotonic()
        for c in children:
            if c.process is not None and not c.process.is_alive():
                c.process.join()
                lived = now - c.started
                c.failures = 0 if lived >= _HEALTHY_S else c.failures + 1
                delay = min(_MAX_RESTART_DELAY_S, 0.5 * 2 ** c.failures) if c.failures else 0.0
                log.warning("worker %d (pid %s) exited with %s after %.0fs; restarting in %.1fs",
                            c.index, c.process.pid, c.process.exitcode, lived, delay)
                c.process, c.restart_at = None, now + delay
            if c.process is None and now >= c.restart_at and not stop.is_set():
                c.process = ctx.Process(target=_child_main, name=f"fleetwatch-worker-{c.index}",
                                        args=(_worker_config(config, c.index), c.index, level,
                                              os.getpid()))
                c.process.start()
                c.started = now
        stop.wait(0.5)
    return _stop_children([c.process for c in children if c.process is not None],
                          config.processor.stop_timeout_s + _STOP_MARGIN_S)


def _worker_config(config: Config, index: int) -> Config:
    port = config.processor.metrics_port
    return dataclasses.replace(config, processor=dataclasses.replace(
        config.processor, workers=1, metrics_port=port + index if port else 0))


def _stop_children(procs: list[BaseProcess], wait_s: float) -> int:
    for p in procs:
        if p.is_alive():
            p.terminate()  # SIGTERM: the member finishes its batch and leaves the group
    deadline = time.monotonic() + wait_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            log.warning("worker pid %s did not stop within %.0fs; killing it", p.pid,
                        wait_s)
            p.kill()
            p.join(5)
    codes = [p.exitcode for p in procs]
    log.info("workers stopped with exit codes %s", codes)
    # -SIGTERM: a worker still starting up, stopped before it had set its handlers.
    return 0 if all(code in (0, -signal.SIGTERM) for code in codes) else 1


def _child_main(config: Config, index: int, level: int, parent: int) -> None:
    """A worker: one group member, in its own interpreter; exits with the member's code."""
    logging.basicConfig(level=level, format=f"%(asctime)s %(levelname)s %(name)s[w{index}]: "
                        "%(message)s")
    quiet_kafka_client()  # a fresh interpreter: the parent's logger levels are not inherited
    stop = stop_on_signals(Stop())

    def orphaned() -> None:  # the supervisor was killed: do not run on unsupervised
        while not stop.wait(1.0):
            if os.getppid() != parent:
                log.warning("supervisor %d is gone; stopping", parent)
                stop.set()

    threading.Thread(target=orphaned, name="supervisor-watch", daemon=True).start()
    try:
        code = _member(config, stop, index=index)
    except PortInUse as exc:  # one line, not a traceback; the supervisor restarts it later
        log.error("worker %d cannot serve /metrics: %s", index, exc)
        code = 1
    raise SystemExit(leave(code))
