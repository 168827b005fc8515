"""A simulated fleet: jobs, power, heat and injected faults, deterministic under a seed."""

from fleetwatch.collectors.sim.faults import Fault, FaultRecord, parse_fault
from fleetwatch.collectors.sim.fleet import FleetSim, SimParams

__all__ = ["Fault", "FaultRecord", "FleetSim", "SimParams", "parse_fault"]
