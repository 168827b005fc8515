"""``fleetwatch up``: the whole system in one process, nothing to install.

Real NVML when an NVIDIA GPU is present, else a simulated fleet; the
in-process bus; the embedded store; the dashboard on localhost. The agent and
the processor run in threads; the dashboard serves in the foreground.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetwatch.collectors.agent import Agent
from fleetwatch.collectors.clock import Clock, SimClock, WallClock
from fleetwatch.collectors.sim import Fault, FleetSim, SimParams
from fleetwatch.collectors.sim.source import SimSource
from fleetwatch.collectors.source import FrameSource
from fleetwatch.config import Config, StoreConfig
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.simulate import fault_annotations
from fleetwatch.wiring import detectors, open_consumer, open_producer, open_store

log = logging.getLogger(__name__)

SIM_STORE_PATH = "fleetwatch-sim.db"


@dataclass(frozen=True)
class UpOptions:
    simulate: bool | None = None      # None: simulate only when no NVIDIA GPU is found
    interval_s: float = 5.0
    backfill_s: float = 15 * 60.0     # the simulation starts this far in the past...
    speed: float = 30.0               # ...and runs this much faster until it is now
    faults: Sequence[Fault] = ()
    fresh: bool = True                # a simulated fleet starts from an empty store


def gpu_present() -> bool:
    """True when NVML loads and sees at least one GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver, no device: all mean "no GPU here"
        return False


class System:
    """Agent + processor threads over the in-process bus; start() then stop()."""

    def __init__(self, config: Config, source: FrameSource, clock: Clock,
                 interval_s: float) -> None:
        self.config = config
        self.bus = MemoryBus()
        self.store = open_store(config.store)
        bus_config = dataclasses.replace(config.bus, kind="memory")
        self.consumer = open_consumer(bus_config, self.bus)
        self.processor = Processor(self.store, detectors(config.detectors))
        self.agent = Agent(source, open_producer(bus_config, self.bus), config.bus.topic)
        self.clock = clock
        self.interval_s = interval_s
        self.stop_event = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> System:
        self._threads = [
            threading.Thread(target=self.processor.run, args=(self.consumer, self.stop_event),
                             kwargs={"maintain_every_s": 10.0}, name="processor", daemon=True),
            threading.Thread(target=self.agent.run,
                             args=(self.interval_s, self.stop_event, self.clock),
                             name="agent", daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def status(self) -> str:
        """One line for the terminal: how far along, what is stored, what is alerting."""
        now = self.clock.now()
        behind = time.time() - now
        when = time.strftime("%H:%M:%S", time.localtime(now))
        if behind > 2 * self.interval_s:
            when += f" (catching up, {behind / 60:.0f} min behind)"
        firing = [a for a in self.processor.alerts.open if a.state == "firing"]
        pending = len(self.processor.alerts.open) - len(firing)
        names = ", ".join(f"{a.node} {a.device}" for a in firing[:3])
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

    def stop(self) -> None:
        self.stop_event.set()
        for t in self._threads:
            t.join(10)
        self.agent.source.close()
        self.store.close()


def build(config: Config, options: UpOptions) -> tuple[System, str]:
    """The system and a one-line description of its source."""
    simulate = options.simulate if options.simulate is not None else not gpu_present()
    if simulate:
        if config.store.kind == "sqlite" and config.store.path == StoreConfig().path:
            # Simulated data never goes into (or wipes) the file real data would use.
            config = dataclasses.replace(
                config, store=dataclasses.replace(config.store, path=SIM_STORE_PATH))
        if options.fresh:
            for suffix in ("", "-wal", "-shm"):
                Path(config.store.path + suffix).unlink(missing_ok=True)
        start = time.time() - options.backfill_s
        s = config.sim
        params = SimParams(nodes=s.nodes, gpus=s.gpus, nodes_per_rack=s.nodes_per_rack,
                           seed=s.seed, interval_s=options.interval_s,
                           job_mean_s=s.job_mean_s, idle_mean_s=s.idle_mean_s)
        sim = FleetSim(params, start, options.faults)
        system = System(config, SimSource(sim), SimClock(start, options.speed),
                        options.interval_s)
        system.store.write_annotations(fault_annotations(sim.ground_truth))
        what = (f"simulated fleet: {s.nodes} nodes x {s.gpus} GPUs, seed {s.seed}, "
                f"{options.interval_s:g} s samples")
        return system, what
    from fleetwatch.collectors.node import node_source

    system = System(config, node_source(config), WallClock(), options.interval_s)
    return system, f"this node's GPUs through NVML ({config.node.node})"
