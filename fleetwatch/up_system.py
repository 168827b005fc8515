"""What ``fleetwatch up`` runs (``fleetwatch.up``): the agent and the processor in threads
over the in-process bus, started and stopped in order, and the status line it prints.

Stopping never loses what was sent while the processor can store it: the agent stops
first, the processor stores and commits every frame already sent (``DRAIN_S`` at most),
then the store is closed and its lock released. A processor out of memory stops the
whole system (``halt``), not only its own thread.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from fleetwatch.collectors.agent import Agent
from fleetwatch.collectors.clock import Clock
from fleetwatch.collectors.sim import Fault
from fleetwatch.collectors.source import FrameSource
from fleetwatch.config import Config
from fleetwatch.pipeline.alert_summary import summary
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.out_of_memory import OutOfMemory
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Annotation, StoreLost
from fleetwatch.service import Stop
from fleetwatch.store_switch import left_behind
from fleetwatch.storelock import StoreLock
from fleetwatch.wiring import (
    detectors,
    energy_integrator,
    learned_detectors,
    open_consumer,
    open_notifier,
    open_producer,
    open_store,
)

log = logging.getLogger(__name__)

# How long stop() waits for the processor to store what the agent already sent.
DRAIN_S = 20.0


class System:
    """Agent + processor threads over the in-process bus; start() then stop().

    ``lock`` (the store's, held by the caller's build) is released by stop().
    """

    def __init__(self, config: Config, source: FrameSource, clock: Clock,
                 interval_s: float, lock: StoreLock | None = None) -> None:
        self.config = config
        self.bus = MemoryBus()
        self.store = open_store(config.store)
        behind = left_behind(config, self.store, time.time())
        if behind:  # a server store, the old SQLite file's silences not carried over
            log.warning("%s", behind)
        bus_config = dataclasses.replace(config.bus, kind="memory")
        self.consumer = open_consumer(bus_config, self.bus)
        self.notifier = open_notifier(dataclasses.replace(config, bus=bus_config), self.store,
                                      self.bus)
        rules = [*detectors(config.detectors), *learned_detectors(config.models)]
        self.processor = Processor(self.store, rules, notifier=self.notifier,
                                   energy=energy_integrator(config.energy, self.store),
                                   keep_firing_s=config.alerts.keep_firing_s,
                                   max_clock_ahead_s=config.processor.max_clock_ahead_s)
        self.agent = Agent(source, open_producer(bus_config, self.bus), config.bus.topic)
        self.clock = clock
        self.interval_s = interval_s
        self.lock = lock
        self.stop_event = threading.Event()        # the agent, the status line
        self.processor_stop = threading.Event()    # the processor, once it has drained the bus
        self._threads: list[threading.Thread] = []
        self._pending_since: dict[str, float] = {}  # pending alert id -> first seen (wall)
        self.fault_notes: list[str] = []  # per injected fault, said after it in the banner
        # --keep: faults asked for whose stored window has ended, with it (not replayed).
        self.faults_not_replayed: list[tuple[Fault, Annotation]] = []
        self.continued_from: float | None = None  # --keep: the newest sample it continues
        self.live_warning = ""  # --into-live-store onto a live store: said in the banner
        # Why the processor ended before it was asked to (out of memory); None: it did not.
        self.failure: OutOfMemory | StoreLost | None = None
        self.halt: Stop | None = None  # set, with its cause, when the processor fails

    def start(self) -> System:
        self._threads = [
            threading.Thread(target=self._process, name="processor", daemon=True),
            threading.Thread(target=self.agent.run,
                             args=(self.interval_s, self.stop_event, self.clock),
                             name="agent", daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def _process(self) -> None:
        """The processor's thread. Out of memory, it ends (``out_of_memory.OutOfMemory``):
        then the whole of ``up`` stops (``halt``), not only this thread, which would leave
        the agent sending and the dashboard showing data that is no longer stored."""
        try:
            self.processor.run(self.consumer, self.processor_stop, maintain_every_s=10.0)
        except (OutOfMemory, StoreLost) as exc:
            self.failure = exc  # said by _serve as it stops, with what became of the frames
            if self.halt is not None and not self.halt.is_set():
                self.halt.cause = ("out of memory" if isinstance(exc, OutOfMemory)
                                   else "store file moved")
                self.halt.set()

    def pending(self) -> bool:
        """True while an alert that went pending lately waits out its for-duration (the
        simulated clock then slows): each pending alert slows it for at most two refreshes
        of the page, so that it is seen once, and the catch-up then goes on at full speed
        even while warnings with long for-durations stay pending."""
        now = time.monotonic()
        seen = self._pending_since
        ids = {a.id for a in self.processor.alerts.open if a.state == "pending"}
        for gone in set(seen) - ids:
            del seen[gone]
        window = 2 * self.config.dashboard.refresh_s
        return any(now - seen.setdefault(i, now) < window for i in ids)

    def store_problem(self) -> str | None:
        """While the processor's store writes fail: since when, and why (the page and the
        status line say it, as the data otherwise look merely slow)."""
        failing = self.processor.stats.store_failing
        if failing is None:
            return None
        since = time.strftime("%H:%M:%S", time.gmtime(failing[0]))
        return f"store not writable since {since} UTC: {failing[1]}"

    def status(self) -> str:
        """One line for the terminal: how far along, what is stored, what is alerting."""
        problem = self.store_problem()
        if problem:
            return (f"{problem} · {self.processor.stats.frames:,} frames stored; nothing "
                    "more is until it is fixed")
        now = self.clock.now()
        behind = time.time() - now
        when = time.strftime("%H:%M:%S", time.localtime(now))
        if behind > 2 * self.interval_s:
            when += f" (catching up, {behind / 60:.0f} min behind)"
        firing = [a for a in self.processor.alerts.open if a.state == "firing"]
        pending = len(self.processor.alerts.open) - len(firing)
        names = summary(firing)
        return (f"data to {when} · {self.processor.stats.frames:,} frames stored · "
                f"alerts: {len(firing)} firing{f' ({names})' if names else ''}, "
                f"{pending} pending")

    def report_every(self, seconds: float, out=None) -> None:
        """Print ``status()`` every ``seconds`` until stopped (a daemon thread)."""
        import sys

        def loop() -> None:
            while not self.stop_event.wait(seconds):
                print(f"  {self.status()}", file=out or sys.stderr, flush=True)

        threading.Thread(target=loop, name="status", daemon=True).start()

    def unstored(self) -> int:
        """Frames the agent sent that the processor has not yet stored (or dead-lettered)."""
        s = self.processor.stats
        return max(0, self.agent.frames_sent - s.frames - s.dead_letters)

    def stop(self, drain_s: float = DRAIN_S) -> int:
        """Stop the agent, let the processor store and commit every frame already sent,
        then stop it and close the store. Returns the frames left unstored (0 normally)."""
        self.stop_event.set()
        agent = [t for t in self._threads if t.name == "agent"]
        for t in agent:
            t.join(10)
        deadline = time.monotonic() + drain_s
        processor = [t for t in self._threads if t.name == "processor"]
        while any(t.is_alive() for t in processor) and self.unstored() \
                and time.monotonic() < deadline:  # a processor out of memory stores no more
            time.sleep(0.05)
        self.processor_stop.set()
        for t in self._threads:
            t.join(10)
        left = self.unstored()
        self.agent.source.close()
        self.notifier.close()
        self.store.close()
        if self.lock is not None:
            self.lock.release()
        return left
