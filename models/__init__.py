"""Anomaly detection: rules, peer comparison and learned models.

Every detector is a ``Detector``: it sees batches of frames and says what is
wrong now as ``Finding``s. Detectors never touch the bus or the store; the
processor feeds them and the alert lifecycle in ``fleetwatch.pipeline.alerts``
turns findings into alerts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from fleetwatch.frame import Frame


@dataclass(frozen=True, slots=True)
class Finding:
    """A condition that holds now for one subject (a GPU, or a node when ``gpu`` is None)."""

    rule: str
    cluster: str
    rack: str
    node: str
    gpu: int | None
    ts: float
    value: float
    message: str
    severity: str = "warning"
    # How long the condition must hold before the alert fires.
    for_s: float = 0.0


class Detector(Protocol):
    name: str

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        """Findings that hold at the time of these frames (all from one batch)."""
