"""Clocks for the agent loop: the wall clock, or a simulated one that catches up.

``SimClock`` starts ``backfill_s`` in the past and runs ``speed`` times faster
than the wall until it reaches the present, then keeps real time. So a
simulated fleet can show an hour of history within seconds, and never writes
a timestamp from the future.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch, in the clock's own time."""

    def wall_seconds(self, seconds: float) -> float:
        """How long ``seconds`` of this clock's time last on the wall clock now."""


class WallClock:
    def now(self) -> float:
        return time.time()

    def wall_seconds(self, seconds: float) -> float:
        return seconds


class SimClock:
    def __init__(self, start_ts: float, speed: float = 1.0, wall: Clock | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be above 0")
        self._wall = wall or WallClock()
        self.start_ts = start_ts
        self.speed = speed
        self._wall0 = self._wall.now()

    def now(self) -> float:
        wall = self._wall.now()
        return min(wall, self.start_ts + (wall - self._wall0) * self.speed)

    def catching_up(self) -> bool:
        return self.now() < self._wall.now() - 1e-3

    def wall_seconds(self, seconds: float) -> float:
        return seconds / self.speed if self.catching_up() else seconds
