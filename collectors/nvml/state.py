"""What the NVML reader shares: its errors, what it knows of each GPU, and its result.

Split from ``reader.py`` to keep each module short; ``reader`` re-exports the
public names.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from fleetwatch.collectors.nvml.backend import MigInstance
from fleetwatch.frame import GpuReading

log = logging.getLogger("fleetwatch.collectors.nvml.reader")

T = TypeVar("T")
MAX_XIDS_PER_TICK = 256
Probe = tuple[str, tuple[str, ...], Callable[..., Any], tuple[int, ...], float]
# Answers that will not change while the agent runs: the metric is absent, and not asked again.
_ABSENT = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION,
           pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

# What to tell the operator when nvmlInit fails, by error class.
_INIT_HINTS: dict[type, tuple[str, str]] = {
    pynvml.NVMLError_LibraryNotFound: (
        "NVML library libnvidia-ml.so.1 not found",
        "install the NVIDIA driver (it ships libnvidia-ml.so.1); in a container, run it with "
        "the NVIDIA Container Toolkit (docker --gpus all, or the nvidia RuntimeClass)"),
    pynvml.NVMLError_DriverNotLoaded: (
        "the NVIDIA kernel driver is not loaded",
        "install the NVIDIA driver or load it (modprobe nvidia), then check nvidia-smi"),
    pynvml.NVMLError_LibRmVersionMismatch: (
        "NVIDIA driver/library version mismatch",
        "the driver was upgraded without a reboot: reboot the node (or reload the nvidia "
        "kernel modules) so the kernel module matches libnvidia-ml.so"),
    pynvml.NVMLError_NoPermission: (
        "no permission to open /dev/nvidia*",
        "run the agent as root, or give its user access to /dev/nvidia*"),
}


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine; ``reason`` says why, ``hint`` what to do."""

    def __init__(self, reason: str, hint: str) -> None:
        super().__init__(f"{reason}. HINT: {hint}")
        self.reason = reason
        self.hint = hint


class NvmlDriverGone(RuntimeError):
    """Every NVML call answers Uninitialized: the driver was unloaded or reset under us.

    The reader's values are no longer fresh; the caller closes the reader (one
    nvmlShutdown for its nvmlInit) and opens a new one later.
    """


class _GpuLost(Exception):
    pass


class _DriverGone(Exception):
    pass


def error_kind(exc: BaseException) -> str:
    """A short label for an NVML error, in snake case: ``NVMLError_Unknown`` -> ``unknown``,
    ``NVMLError_GpuIsLost`` -> ``gpu_is_lost`` (one label value per error, whichever path
    counted it)."""
    name = type(exc).__name__
    if not name.startswith("NVMLError_"):
        return name
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.removeprefix("NVMLError_")).lower()


# XID 79: "GPU has fallen off the bus". The GPU is gone the moment the driver says so,
# whatever a later call would answer.
XID_FALLEN_OFF_BUS = 79
StateCallback = Callable[[int, str, str, str], None]  # (index, uuid, new state, why)


@dataclass
class _Gpu:
    index: int
    uuid: str
    model: str
    info: dict[str, str]
    fields: list[tuple[int, int, str, float]]
    gpm: bool
    nvlinks: int
    lost: bool = False
    skip: set[str] = field(default_factory=set)  # answered NotSupported (until MIG changes)
    slow: dict[str, float] = field(default_factory=dict)
    links_down: float | None = None
    probes: list[Probe] = field(default_factory=list)
    request: list[tuple[int, int]] = field(default_factory=list)  # the field-values batch
    outputs: list[tuple[str, float]] = field(default_factory=list)  # its (metric, factor)
    pcie_counters: bool = False
    pcie_prev: dict[str, tuple[float, float]] = field(default_factory=dict)
    events: bool = False  # registered for NVML XID events
    # Calls (or fields) failing now, other than "not supported": key -> (kind, how often).
    failing: dict[str, tuple[str, int]] = field(default_factory=dict)
    # Calls that took longer than the reader's call budget: key -> the tick to ask again.
    slowed: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NvmlRead:
    gpus: list[GpuReading]
    pids: dict[int, list[int]]  # GPU index -> pids of its compute processes
    # GPU index -> its MIG instances (MIG mode on): /metrics only, not in the frame.
    mig: dict[int, list[MigInstance]] = field(default_factory=dict)


def log_gpu_state(index: int, uuid: str, state: str, why: str) -> None:
    level = logging.INFO if state == "ok" else logging.WARNING
    log.log(level, "GPU %d (%s) is %s: %s", index, uuid, state, why)


# Read on the slow cadence and carried into every tick's metrics: no answer of this tick.
_CARRIED = frozenset({"gpu_nvlink_links_down"})
