"""``fleetwatch simulate``: write days of a simulated fleet's history into a store, fast.

The frames go through the same ``Processor`` as live data (store, detectors,
alerts), in large batches, so the history holds the alerts a live run would
have raised, and the injected faults are stored as annotations: the ground
truth that later evaluations score detectors against.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleetwatch.collectors.sim import Fault, FaultRecord, FleetSim, SimParams
from fleetwatch.models import Detector
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Annotation, Store

BATCH_S = 3600.0  # one hour of simulated time per store transaction


@dataclass(frozen=True)
class SimulateResult:
    frames: int
    points: int
    alerts_changed: int
    seconds: float
    ground_truth: tuple[FaultRecord, ...]

    @property
    def points_per_s(self) -> float:
        return self.points / self.seconds if self.seconds else 0.0


def fault_annotations(records: Sequence[FaultRecord]) -> list[Annotation]:
    return [Annotation("fault", r.onset_ts, r.end_ts, r.node, f"gpu{r.gpu}",
                       f"injected {r.kind} fault (x{r.severity:g})") for r in records]


def simulate(store: Store, params: SimParams, start_ts: float, duration_s: float,
             faults: Sequence[Fault] = (), detectors: Sequence[Detector] = (),
             progress: Callable[[float, int], None] | None = None,
             energy: EnergyIntegrator | None = None) -> SimulateResult:
    """Simulate ``duration_s`` from ``start_ts`` and write it all to ``store``.

    ``progress(fraction_done, points_so_far)`` is called after every batch.
    """
    t0 = time.perf_counter()
    sim = FleetSim(params, start_ts, faults)
    store.write_annotations(fault_annotations(sim.ground_truth))
    processor = Processor(store, detectors, energy=energy)
    end_ts = start_ts + duration_s
    steps_per_batch = max(1, int(BATCH_S / params.interval_s))
    # Serial on purpose: a writer thread would fight the simulation for the GIL
    # and was measured slower than doing one after the other.
    while sim.ts + params.interval_s <= end_ts:
        frames = []
        for _ in range(steps_per_batch):
            if sim.ts + params.interval_s > end_ts:
                break
            sim.step()
            frames.extend(sim.frames())
        processor.process(frames)
        if progress is not None:
            progress((sim.ts - start_ts) / duration_s, processor.stats.points)
    store.maintain(int(end_ts * 1000))
    s = processor.stats
    return SimulateResult(s.frames, s.points, s.alerts_changed, time.perf_counter() - t0,
                          tuple(sim.ground_truth))
