"""What the agent loop reads from: anything that makes frames at an instant."""

from __future__ import annotations

from typing import Protocol

from fleetwatch.frame import Frame


class FrameSource(Protocol):
    def frames(self, ts: float) -> list[Frame]:
        """Frames for the instant ``ts`` (one per node this source covers)."""

    def close(self) -> None: ...
