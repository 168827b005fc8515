"""The simulated clock of ``fleetwatch up``: it catches up with the present fast, but
slows down where a person must be able to see what happens.

``PacedClock`` runs at whatever pace ``CatchUp`` says each time it is read; the
pace is held at 0 while the processor is behind the agent, and slowed while an
alert is pending, so that its for-duration is on the dashboard for at least
one refresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from fleetwatch.collectors.clock import Clock, WallClock
from fleetwatch.config import Config


class Pipeline(Protocol):
    """What the pace looks at: the running agent and processor (``up_system.System``)."""

    def unstored(self) -> int:
        """Frames sent by the agent and not yet stored by the processor."""

    def pending(self) -> bool:
        """True while an alert waits out its for-duration."""


class PacedClock:
    """A simulated clock that runs ``pace()`` times faster than the wall until it
    reaches the present, then keeps real time; a pace of 0 holds it still.

    It is continuous across changes of pace (re-anchored where the pace
    changes) and never runs ahead of the wall.
    """

    def __init__(self, start_ts: float, pace: Callable[[], float],
                 wall: Clock | None = None) -> None:
        self._wall = wall or WallClock()
        self._pace_of = pace
        self._lock = threading.Lock()
        self._anchor_sim = start_ts
        self._anchor_wall = self._wall.now()
        self._pace = pace()

    def now(self) -> float:
        with self._lock:
            wall = self._wall.now()
            sim = min(wall, self._anchor_sim + (wall - self._anchor_wall) * self._pace)
            pace = self._pace_of()
            if pace != self._pace:  # re-anchor, so the clock does not jump
                self._anchor_sim, self._anchor_wall, self._pace = sim, wall, pace
            return sim

    def catching_up(self) -> bool:
        return self.now() < self._wall.now() - 1e-3

    def wall_seconds(self, seconds: float) -> float:
        if not self.catching_up():
            return seconds
        return seconds / self._pace if self._pace > 0 else HELD_POLL_S


# While the clock is held, the agent looks again this often (wall seconds).
HELD_POLL_S = 0.02
# The agent runs at most this many ticks ahead of what the processor has evaluated.
LEAD_TICKS = 2


class CatchUp:
    """The pace of ``up``'s simulated clock.

    At ``speed`` while catching up; held (0) while the processor is more than
    ``LEAD_TICKS`` ticks behind the agent, so an alert's state is decided
    before the clock moves on; and at ``pending_speed`` while an alert is
    pending. At 30x a 60 s for-duration lasts 2 s of wall time and falls
    between two refreshes of the dashboard (5 s): nobody would ever see an
    alert pending. Slowed so that the for-duration lasts two refreshes, it is
    on the screen at least once; then the catch-up goes on at full speed.
    """

    def __init__(self, speed: float, pending_speed: float, frames_per_tick: int) -> None:
        self.speed = speed
        self.pending_speed = min(speed, pending_speed)
        self.frames_per_tick = max(1, frames_per_tick)
        self.system: Pipeline | None = None

    def __call__(self) -> float:
        system = self.system
        if system is None:
            return self.speed
        if system.unstored() > LEAD_TICKS * self.frames_per_tick:
            return 0.0
        return self.pending_speed if system.pending() else self.speed


def pending_pace(config: Config, speed: float, interval_s: float) -> float:
    """How fast the simulated clock runs while an alert is pending: the rest of its
    for-duration (less the agent's lead over the processor, which has run at full
    speed when the processor sees it start) then lasts two dashboard refreshes of
    wall time, so that one refresh always shows it."""
    d = config.detectors  # the for-durations of the alerts `up` shows first
    rest = min(d.peer_for_s, d.high_for_s) - LEAD_TICKS * interval_s
    if rest <= 0:  # it fires within the agent's lead: no slower clock can show it pending
        return speed
    return max(1.0, min(speed, rest / (2 * config.dashboard.refresh_s)))
