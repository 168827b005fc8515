"""A store with two days of a simulated fleet's history, energy ledger included, for the
energy and utilization pages (browser tests and the README screenshots).

The simulator does not name users yet; each job is given one of a few users here, as a
scheduler's accounting would, so that the pages have users to show.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.frame import Frame
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore

USERS = ("alice", "bob", "chen", "dana", "eve")
HOURS = 48
INTERVAL_S = 30.0


def with_users(frames: list[Frame]) -> list[Frame]:
    out = []
    for f in frames:
        gpus = tuple(dataclasses.replace(g, info={"user": USERS[int(g.job) % len(USERS)]})
                     if g.job else g for g in f.gpus)
        out.append(dataclasses.replace(f, gpus=gpus))
    return out


def fill(path: Path, nodes: int = 6, hours: int = HOURS, now: float | None = None) -> None:
    """``hours`` of ``nodes`` x 8 GPUs ending now, in two clusters."""
    now = time.time() if now is None else now
    store = SqliteStore(path)
    processor = Processor(store)
    steps = int(hours * 3600 / INTERVAL_S)
    sims = [FleetSim(SimParams(nodes=nodes // 2, gpus=8, seed=i, interval_s=INTERVAL_S,
                               cluster=name, job_mean_s=4 * 3600, idle_mean_s=3600),
                     start_ts=now - steps * INTERVAL_S)
            for i, name in enumerate(("train-a", "train-b"))]
    batch: list[Frame] = []
    for step in range(steps):
        for sim in sims:
            sim.step()
            batch.extend(with_users(sim.frames()))
        if step % 120 == 119 or step == steps - 1:
            processor.process(batch)
            batch = []
    store.close()
