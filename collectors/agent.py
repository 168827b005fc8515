"""The agent loop: read the source, encode each frame, publish it keyed by node.

Thin I/O around ``Agent.tick``; everything it reads comes from a
``FrameSource``, everything it sends goes to a ``Producer`` (in-process,
Kafka, or Kafka behind the on-disk spool).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from fleetwatch.codec import encode
from fleetwatch.collectors.clock import Clock, WallClock
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
    def __init__(self, source: FrameSource, producer: Producer, topic: str,
                 health: Health | None = None,
                 on_frames: Callable[[list[Frame]], None] | None = None) -> None:
        self.source = source
        self.producer = producer
        self.topic = topic
        self.health = health or _NoHealth()
        self.on_frames = on_frames
        self.frames_sent = 0
        self.send_errors = 0

    def tick(self, ts: float) -> list[Frame]:
        """Read and publish the frames for ``ts``; returns them."""
        t0 = time.perf_counter()
        frames = self.source.frames(ts)
        sent = 0
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
                # Through the spool, a tick's frames are only safe once acknowledged.
                self.producer.flush()
            except BusError as exc:
                log.warning("frames not acknowledged: %s", exc)
        self.frames_sent += sent
        self.health.sent(sent)
        if self.on_frames is not None and frames:
            self.on_frames(frames)
        self.health.tick(time.perf_counter() - t0)
        return frames

    def run(self, interval_s: float, stop: threading.Event, clock: Clock | None = None) -> None:
        """Tick every ``interval_s`` of the clock's time until ``stop`` is set."""
        clock = clock or WallClock()
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.tick(clock.now())
            except Exception:  # one bad tick must not end an agent that runs for months
                log.exception("agent tick failed")
            left = clock.wall_seconds(interval_s) - (time.monotonic() - started)
            stop.wait(max(left, 0.0))
