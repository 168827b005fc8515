"""Each GPU's part (its NVML product name) for the fleet heatmap's hover, kept between
refreshes.

The store keeps no model on its series: a GPU slot's part is what its newest
``gpu_identity`` event names (``pipeline.board_events.Board``), as the node page's boards table
reads it. Those events are few (one per board when a processor first sees it), but a
90-day window of them is read once; then only those since the last read (and the last
``RECENT_S`` again: a processor catching up writes them late).
"""

from __future__ import annotations

import threading

from fleetwatch.dashboards.data import BOARD_WINDOW_S, FUTURE_SLACK_S, GpuKey
from fleetwatch.pipeline.board_events import Board
from fleetwatch.pipeline.store.base import gpu_index

RECENT_S = 3600.0


class FleetParts:
    """One per dashboard: the parts named so far, and up to when they were read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the server's threads refresh several tabs at once
        self.parts: dict[GpuKey, str] = {}
        self.read_to: float | None = None

    def read(self, store: object, now: float) -> dict[GpuKey, str]:
        """(cluster, node, gpu) -> product name; none from a store that keeps no events."""
        events = getattr(store, "events", None)
        if events is None:
            return {}
        with self._lock:
            if self.read_to is None or now < self.read_to - RECENT_S:  # first, or time went back
                self.parts, since = {}, now - BOARD_WINDOW_S
            else:
                since = self.read_to - RECENT_S
            for e in sorted(events(since, now + FUTURE_SLACK_S, kinds=["gpu_identity"]),
                            key=lambda e: e.ts):
                index, model = gpu_index(e.device), Board.of_event(e).model
                if index is not None and model:
                    self.parts[(e.cluster, e.node, index)] = model
            self.read_to = now
            return dict(self.parts)
