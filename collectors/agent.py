"""The agent loop: read the source on its own clock, encode each frame, hand it on.

Thin I/O around ``Agent.tick``; everything it reads comes from a
``FrameSource``. What it makes goes to a ``Producer`` (in-process, Kafka, or
Kafka behind the on-disk spool) directly, or through a ``Sender`` thread, so
that a broker outage never delays a sample (``fleetwatch agent`` does that).

The clock is a schedule, not a sleep after work: tick k is due at
``start + k * interval``; a tick that ends late is followed at once by the next
due one, and only a tick that could not start before the one after it was due
is skipped (counted as missed: the source itself is slower than the interval).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from fleetwatch.codec import encode
from fleetwatch.collectors.clock import Clock, WallClock
from fleetwatch.collectors.sender import Sender
from fleetwatch.collectors.source import FrameSource
from fleetwatch.frame import Frame
from fleetwatch.pipeline.bus import BusError, Producer

log = logging.getLogger(__name__)


class Health(Protocol):
    """What the loop reports about itself (the exporter turns it into metrics)."""

    def sent(self, n: int) -> None: ...

    def tick(self, seconds: float) -> None: ...


class _NoHealth:
    def sent(self, n: int) -> None:
        return None

    def tick(self, seconds: float) -> None:
        return None


class Agent:
    def __init__(self, source: FrameSource, producer: Producer | None, topic: str,
                 health: Health | None = None,
                 on_frames: Callable[[list[Frame]], None] | None = None,
                 sender: Sender | None = None) -> None:
        self.source = source
        self.producer = producer
        self.topic = topic
        self.health = health or _NoHealth()
        self.on_frames = on_frames
        self.sender = sender
        self.frames_sent = 0
        self.send_errors = 0
        self.ticks = 0
        self.missed_ticks = 0

    def tick(self, ts: float) -> list[Frame]:
        """Read the frames for ``ts`` and hand them on; returns them."""
        t0 = time.perf_counter()
        frames = self.source.frames(ts)
        self.ticks += 1
        if self.sender is not None:
            for f in frames:
                self.sender.put(self.topic, encode(f), f.node.encode())
        elif self.producer is not None:
            self._send(frames)
        if self.on_frames is not None and frames:
            self.on_frames(frames)
        self.health.tick(time.perf_counter() - t0)
        return frames

    def _send(self, frames: list[Frame]) -> None:
        sent = 0
        assert self.producer is not None
        for f in frames:
            try:
                self.producer.send(self.topic, encode(f), key=f.node.encode())
                sent += 1
            except BusError as exc:
                # A producer without a spool has nowhere to keep the frame.
                self.send_errors += 1
                log.warning("frame from %s at %.0f not sent: %s", f.node, f.ts, exc)
        if sent:
            try:
                self.producer.flush()
            except BusError as exc:
                log.warning("frames not acknowledged: %s", exc)
        self.frames_sent += sent
        self.health.sent(sent)

    def run(self, interval_s: float, stop: threading.Event, clock: Clock | None = None) -> None:
        """Tick every ``interval_s`` of the clock's time until ``stop`` is set."""
        clock = clock or WallClock()
        due = time.monotonic()
        while not stop.is_set():
            try:
                self.tick(clock.now())
            except Exception:  # one bad tick must not end an agent that runs for months
                log.exception("agent tick failed")
            period = clock.wall_seconds(interval_s)
            due += period
            now = time.monotonic()
            if now >= due + period:
                # The tick after this one is also already due: the source is slower than
                # the interval. Skip to the next future slot and count what went, except
                # while a simulated clock catches up (it runs as fast as it can on purpose).
                behind = int((now - due) // period)
                due += behind * period
                if not getattr(clock, "catching_up", lambda: False)():
                    self.missed_ticks += behind
                    if self.missed_ticks == behind or self.missed_ticks % 100 < behind:
                        log.warning("an agent tick took longer than the interval (%gs): %d "
                                    "ticks missed so far", interval_s, self.missed_ticks)
            stop.wait(max(due - time.monotonic(), 0.0))
