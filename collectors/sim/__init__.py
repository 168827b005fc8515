"""A simulated fleet: jobs, power, heat and injected faults, deterministic under a seed."""

from fleetwatch.collectors.sim.faults import KINDS, SPECS, Fault, FaultRecord, parse_fault
from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.collectors.sim.schedule import random_schedule

__all__ = ["KINDS", "SPECS", "Fault", "FaultRecord", "FleetSim", "SimParams", "parse_fault",
           "random_schedule"]
