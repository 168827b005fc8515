"""``fleetwatch process``: one member of the processors' consumer group, or N of them.

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

import dataclasses
import logging
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.process import BaseProcess

from fleetwatch.config import Config
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.service import needs_kafka, stop_on_signals
from fleetwatch.wiring import detectors, open_consumer, open_producer, open_store

log = logging.getLogger(__name__)


def run_processor(config: Config, stop: threading.Event | None = None) -> int:
    if not needs_kafka(config, "process"):
        return 2
    stop = stop_on_signals(stop)
    _ensure_topics(config)
    if config.processor.workers > 1:
        return _supervise(config, stop)
    return _member(config, stop)


def _member(config: Config, stop: threading.Event) -> int:
    store = open_store(config.store)
    consumer = open_consumer(config.bus)
    dead = open_producer(config.bus)
    processor = Processor(store, detectors(config.detectors), dead, config.bus.dead_letter_topic)
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
                             kafka_security(config.bus),
                             replication_factor=config.bus.replication_factor)
            log.info("topic %s has %d partitions", topic, n)
        except (BusError, OSError) as exc:
            log.warning("could not check or create topic %s (%s); create it with your Kafka "
                        "tools if it does not exist", topic, exc)


# A child that dies sooner than this after its start is restarted after a
# growing delay, so that a member that cannot start does not spin.
_HEALTHY_S = 30.0
_MAX_RESTART_DELAY_S = 30.0
_STOP_WAIT_S = 30.0


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
    return _stop_children([c.process for c in children if c.process is not None])


def _worker_config(config: Config, index: int) -> Config:
    port = config.processor.metrics_port
    return dataclasses.replace(config, processor=dataclasses.replace(
        config.processor, workers=1, metrics_port=port + index if port else 0))


def _stop_children(procs: list[BaseProcess]) -> int:
    for p in procs:
        if p.is_alive():
            p.terminate()  # SIGTERM: the member finishes its batch and leaves the group
    deadline = time.monotonic() + _STOP_WAIT_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            log.warning("worker pid %s did not stop within %.0fs; killing it", p.pid,
                        _STOP_WAIT_S)
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
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def orphaned() -> None:  # the supervisor was killed: do not run on unsupervised
        while not stop.wait(1.0):
            if os.getppid() != parent:
                log.warning("supervisor %d is gone; stopping", parent)
                stop.set()

    threading.Thread(target=orphaned, name="supervisor-watch", daemon=True).start()
    raise SystemExit(_member(config, stop))
