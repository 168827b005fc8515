"""Fixtures for the dashboard tests: Chromium kept off the network, a simulated fleet store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium.webdriver.chrome.options import Options

from fleetwatch.collectors.sim import FleetSim, SimParams, parse_fault
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.simulate import fault_annotations

CHROMIUM = "/usr/bin/chromium"
# No request leaves the machine: every host but the test server resolves to nothing.
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
    "--window-size=1400,900",
)
HOT = ("node-001", 3)
FAULT = f"cooling:{HOT[0]}/{HOT[1]}@1m+40m"
STEPS = 120
INTERVAL_S = 15.0


def pytest_setup_options() -> Options:
    """dash[testing]'s hook: the options its Chrome webdriver starts with."""
    options = Options()
    if Path(CHROMIUM).exists():
        options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    return options


@dataclass
class SimFleet:
    """A SQLite store fed by a running simulation, which a test can advance."""

    path: Path
    store: SqliteStore
    sim: FleetSim
    processor: Processor

    def advance(self, steps: int) -> None:
        for _ in range(steps):
            self.sim.step()
            self.processor.process(self.sim.frames())

    def reader(self) -> SqliteStore:
        """A second, read-only handle: what the dashboard gets in production."""
        return SqliteStore(self.path, read_only=True)


@pytest.fixture
def sim_fleet(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SimFleet]:
    """4 nodes x 8 busy GPUs over the last 30 minutes, node-001 GPU 3 losing its cooling.

    A test marked ``headroom(S)`` gets the 30 minutes ending S seconds ago: room to advance
    the fleet without stamping samples after now (the fleet page names those as a node's
    clock ahead, and its "data as of" stops at now).

    The fault starts a minute in and lasts 40, so the 85 °C alert is firing by
    the end; jobs never end, so no GPU cools for an unrelated reason.
    """
    store = SqliteStore(tmp_path / "fleet.db")
    params = SimParams(nodes=4, gpus=8, interval_s=INTERVAL_S, job_mean_s=1e9, idle_mean_s=1,
                       busy_at_start=1.0, steady_load=True)
    marker = request.node.get_closest_marker("headroom")
    headroom = float(marker.args[0]) if marker else 0.0
    sim = FleetSim(params, start_ts=time.time() - STEPS * INTERVAL_S - headroom,
                   faults=[parse_fault(FAULT)])
    fleet = SimFleet(tmp_path / "fleet.db", store, sim,
                     Processor(store, [GpuTemperatureLimit(85, for_s=60)]))
    fleet.advance(STEPS)
    # The simulator's ground truth, as `fleetwatch simulate` records it beside the data.
    store.write_annotations(fault_annotations(sim.ground_truth, params.cluster))
    yield fleet
    store.close()
