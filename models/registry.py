"""The detectors fleetwatch knows, by the name config enables them with.

One explicit table: a name, and how to build the detector from ``[detectors]``.
``build`` refuses an unknown name with the list of known ones, so a typo in
config stops start-up instead of silently turning a detector off.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetwatch.config import ConfigError, DetectorsConfig
from fleetwatch.models import Detector
from fleetwatch.models.gpu_errors import GpuErrors
from fleetwatch.models.job_hang import JobHang
from fleetwatch.models.jobs import JobPeers
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.models.peers import ThermalPeers
from fleetwatch.models.rack import RackCooling
from fleetwatch.models.room import RoomInlet
from fleetwatch.models.thermal import ThermalLimits
from fleetwatch.models.throttle import Throttle
from fleetwatch.models.xid_events import XidEvents

REGISTRY: dict[str, Callable[[DetectorsConfig], Detector]] = {
    "thermal_limits": ThermalLimits,
    "throttle": Throttle,
    "thermal_peers": ThermalPeers,
    "rack_cooling": RackCooling,
    "room_inlet": RoomInlet,
    "xid": XidEvents,
    "gpu_errors": GpuErrors,
    "node_silent": NodeSilence,
    "job_peers": JobPeers,
    "job_hang": JobHang,
}


def build(config: DetectorsConfig) -> list[Detector]:
    """The enabled detectors, in the order config lists them."""
    unknown = [n for n in config.enabled if n not in REGISTRY]
    if unknown:
        raise ConfigError(f"detectors.enabled: unknown detector(s) {', '.join(map(repr, unknown))}"
                          f"; known: {', '.join(REGISTRY)}")
    if len(set(config.enabled)) != len(config.enabled):
        raise ConfigError(f"detectors.enabled lists a detector twice: {list(config.enabled)}")
    return [REGISTRY[name](config) for name in config.enabled]


def rules() -> dict[str, tuple[str, ...]]:
    """Every rule any detector emits, with the metrics it needs (for docs and dashboards)."""
    out: dict[str, tuple[str, ...]] = {}
    for factory in REGISTRY.values():
        out.update(factory(DetectorsConfig()).rules)
    return out
