"""The one record every stage speaks: a node's snapshot at one instant.

A ``Frame`` carries the node's identity, the time, one ``GpuReading`` per GPU
and the host's readings. Metrics are keyed by their catalogue name; a metric
a GPU does not support is absent, never 0. The wire form lives in
``fleetwatch.codec``; nothing else encodes or decodes frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

FRAME_VERSION = 1
# The host metric of an agent's last frame when it stopped cleanly (a signal: a scale-down,
# systemctl stop): the node is recorded as stopped, not paged silent (``stopped``).
AGENT_STOPPED = "host_agent_stopped"

GpuState = Literal["ok", "lost"]
PortKind = Literal["nic", "ib"]


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    uuid: str
    model: str
    metrics: Mapping[str, float]
    job: str | None = None
    state: GpuState = "ok"
    # XID codes seen since the previous frame, oldest first (each one an event).
    xids: tuple[int, ...] = ()
    # Identity that rarely changes: serial, pci_bus_id, driver, mig_mode.
    info: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PortReading:
    """One network port of the host: a NIC (``eth0``) or an InfiniBand port (``mlx5_0/1``)."""

    name: str
    kind: PortKind
    metrics: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class HostReading:
    metrics: Mapping[str, float] = field(default_factory=dict)
    ports: tuple[PortReading, ...] = ()


@dataclass(frozen=True, slots=True)
class Frame:
    cluster: str
    rack: str
    node: str
    ts: float  # seconds since the Unix epoch, UTC
    gpus: tuple[GpuReading, ...]
    host: HostReading = field(default_factory=HostReading)
    # Per-agent sequence number: lets a reader see gaps and order.
    seq: int = 0
    v: int = FRAME_VERSION

    def gpu(self, index: int) -> GpuReading | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None


def is_board_uuid(uuid: str) -> bool:
    """A UUID NVML read (``GPU-...``), not a stand-in: the reader's ``GPU-unknown-N`` for a
    GPU it could not open, a replay's ``node/gpuN`` for files that carry none."""
    return uuid.startswith(("GPU-", "MIG-")) and not uuid.startswith("GPU-unknown-")


_new = object.__new__
_gpu_slots = tuple(GpuReading.__dict__[name].__set__ for name in (
    "index", "uuid", "model", "metrics", "job", "state", "xids", "info"))


def gpu_reading(index: int, uuid: str, model: str, metrics: Mapping[str, float],
                job: str | None, state: GpuState, xids: tuple[int, ...],
                info: Mapping[str, str]) -> GpuReading:
    """``GpuReading(...)`` with every field given, at half the cost, for the decoder.

    A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``; this fills the slots directly (0.8 µs against
    1.6 µs, measured), and a processor builds one per GPU per frame. The
    result is the same frozen ``GpuReading``.
    """
    g = _new(GpuReading)
    s_index, s_uuid, s_model, s_metrics, s_job, s_state, s_xids, s_info = _gpu_slots
    s_index(g, index)
    s_uuid(g, uuid)
    s_model(g, model)
    s_metrics(g, metrics)
    s_job(g, job)
    s_state(g, state)
    s_xids(g, xids)
    s_info(g, info)
    return g


def stopped(frame: Frame) -> bool:
    """Is this the last frame of an agent that stopped cleanly (``AGENT_STOPPED``)?"""
    return frame.host.metrics.get(AGENT_STOPPED) == 1.0
