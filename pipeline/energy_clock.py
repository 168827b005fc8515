"""A node's clock as the energy integrator sees it: steps back, and clock errors.

An agent numbers its frames (``seq``, from the wall clock in ms at its start, one
more per frame), so a frame whose ``seq`` is past every one seen while its time is
before the node's newest is unambiguous: the node's clock stepped back (NTP
correcting a fast clock). Its frames from then on overlap times already booked;
skipped as "at or before the watermark", the node's energy would be lost for as
long as the step. Instead the integrator cuts the batch there and re-anchors the
node's watermarks on that frame, booking the node's usual interval before it from
its energy counter (which ran on); frames of before the step that arrive later
(``seq`` below the step's, time not past the old newest) are passed over. A frame
without ``seq`` (0: a replay of a recording) cannot say so and is judged as before.

Each step back is counted and said once per node; so are clock errors (a jump
further than ``max_jump_s``: the node starts anew) and frames stamped again over
times the node already sent (the store keeps one sample per series and time, so
each such frame replaces one stored before the step).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone

from fleetwatch.frame import Frame

log = logging.getLogger(__name__)


class NodeClock:
    """In memory, per node: the newest ``seq`` seen (0: none) and that frame's time, the
    node's last interval within ``max_gap_s`` (its cadence; 0: not known), the time of the
    frame a step back re-anchors on (None: none pending), and the step's (seq, old newest
    time) while its overlap lasts."""

    __slots__ = ("seq", "seq_ts", "cadence", "anchor", "guard")

    def __init__(self, seq: int = 0, seq_ts: float = 0.0, cadence: float = 0.0,
                 anchor: float | None = None, guard: tuple[int, float] | None = None) -> None:
        self.seq, self.seq_ts, self.cadence = seq, seq_ts, cadence
        self.anchor, self.guard = anchor, guard

    def copy(self) -> NodeClock:
        return NodeClock(self.seq, self.seq_ts, self.cadence, self.anchor, self.guard)


class ClockSteps:
    """The integrator's counts of clock trouble, by kind (``back``: a step back,
    ``forward``: a step forward seen by an energy counter, ``error``: a jump past
    ``max_jump_s``, ``overlap``: a frame stamped again over times
    its node already sent), each kind said once per node."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._said: set[tuple[str, str, str, str]] = set()
        self._forward_at: tuple[str, str, float] | None = None

    def _count(self, kind: str, f: Frame) -> bool:
        """Count one; True the first time for this node (say it then)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        key = (kind, f.cluster, f.node, "")
        if key in self._said or len(self._said) >= 100_000:
            return False
        self._said.add(key)
        return True

    def back(self, f: Frame, newest: float) -> None:
        if self._count("back", f):
            log.warning("%s's clock stepped back %.0f s (frame seq %d stamped %s after one "
                        "stamped %s): its energy goes on from its counter across the step; "
                        "its samples stamped over times it already sent replace those "
                        "stored (counted in fleetwatch_processor_clock_steps; said once "
                        "per node). Check the node's time sync (chrony/ntpd)",
                        f.node, newest - f.ts, f.seq, _iso(f.ts), _iso(newest))

    def error(self, f: Frame, was: float, bound: float) -> None:
        if self._count("error", f):
            log.warning("%s's clock jumped from %s to %s (further than %.0f days, or ahead "
                        "of this processor's clock): a clock error, not an outage; its "
                        "energy starts anew at the new time and the jump is neither energy "
                        "nor missing time (said once per node). Fix the node's clock",
                        f.node, _iso(was), _iso(f.ts), bound / 86400)

    def forward(self, f: Frame, by: float) -> None:
        if (f.cluster, f.node, f.ts) == self._forward_at:
            return  # one step, whatever the number of the node's GPUs that saw it
        self._forward_at = (f.cluster, f.node, f.ts)
        if self._count("forward", f):
            log.warning("%s's clock stepped forward about %.0f s (its energy counter moved "
                        "by what its boards draw in far less time): the time it skipped is "
                        "neither energy nor missing time (said once per node). Check the "
                        "node's time sync (chrony/ntpd)", f.node, by)

    def overlap(self, f: Frame) -> None:
        self._count("overlap", f)


def in_steps(group: Sequence[Frame], clock: NodeClock, newest: float,
             steps: ClockSteps) -> Iterator[tuple[list[Frame], bool]]:
    """A node's frames in arrival order, cut where its clock stepped back: (part, whether
    it begins with a step). Frames of before a step are left out. Updates ``clock``."""
    part: list[Frame] = []
    stepped = False
    for f in group:
        if clock.guard is not None:
            seq, old = clock.guard
            if f.ts > old:
                clock.guard = None  # the clock is past the step: nothing overlaps any more
            elif f.seq and f.seq < seq:
                continue  # sent before the step, arrived after it: its times are booked
            else:
                steps.overlap(f)
        # Stamped before the frame it follows in seq (not merely before the newest: a
        # batch delivered again after a restart goes forward from its own first frame).
        if f.seq and clock.seq and f.seq > clock.seq and f.ts < clock.seq_ts:
            steps.back(f, newest)
            if part or stepped:
                yield part, stepped
            part, stepped = [], True
            clock.guard = (f.seq, newest)
            steps.overlap(f)
            newest = f.ts
        part.append(f)
        newest = max(newest, f.ts)
        if f.seq > clock.seq:
            clock.seq, clock.seq_ts = f.seq, f.ts
    if part:
        yield part, stepped


def _iso(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{ts:.0f}"
