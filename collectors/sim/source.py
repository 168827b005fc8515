"""The simulated fleet as a ``FrameSource`` for the agent loop."""

from __future__ import annotations

from fleetwatch.collectors.sim.fleet import FleetSim
from fleetwatch.frame import Frame


class SimSource:
    """Steps the simulation up to the asked time; every step's frames are returned."""

    def __init__(self, sim: FleetSim) -> None:
        self.sim = sim

    def frames(self, ts: float) -> list[Frame]:
        out: list[Frame] = []
        while self.sim.ts + self.sim.params.interval_s <= ts:
            self.sim.step()
            out.extend(self.sim.frames())
        return out

    def close(self) -> None:
        return None
