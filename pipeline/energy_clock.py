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

An agent that restarts after the step numbers its frames again from the corrected
clock, so seq goes back with the time: more seq than one run counts in that time
(``TICKS_PER_S``) says it is a new run, and the GPUs' energy counters, run on, say the
run is newer, not an earlier one delivered again (those counters are behind). That is
a step back too. A node without energy counters cannot say: its frames are passed
over as delivered again until its clock passes the newest time it sent.

Each step back is counted and said once per node; so are clock errors (a jump
further than ``max_jump_s``: the node starts anew) and frames stamped again over
times the node already sent here (the store keeps one sample per series and time, so
each such frame replaces one stored before the step). A clock error sets no overlap,
and the frame back from it is the same error, counted once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone

from fleetwatch.frame import Frame

log = logging.getLogger(__name__)


class NodeClock:
    """In memory, per node: the newest ``seq`` seen (0: none) and that frame's time, the
    lowest ``seq`` seen of the agent's current run, the node's earliest time seen, its
    GPUs' highest energy counters seen (by index), the node's last interval within
    ``max_gap_s`` (its cadence; 0: not known), the time of the frame a step back
    re-anchors on (None: none pending), the step's (lowest seq, seq bound, old newest
    time, earliest time before it) while its overlap lasts, and the node's time before
    a clock error (None: none)."""

    __slots__ = ("seq", "seq_ts", "first", "since", "counters", "cadence", "anchor",
                 "guard", "erred")

    def __init__(self, seq: int = 0, seq_ts: float = 0.0, cadence: float = 0.0,
                 anchor: float | None = None,
                 guard: tuple[int, float, float, float] | None = None) -> None:
        self.seq, self.seq_ts, self.cadence = seq, seq_ts, cadence
        self.anchor, self.guard = anchor, guard
        self.first = seq
        self.since = math.inf
        self.counters: dict[int, float] = {}
        self.erred: float | None = None

    def copy(self) -> NodeClock:
        c = NodeClock(self.seq, self.seq_ts, self.cadence, self.anchor, self.guard)
        c.first, c.since, c.counters, c.erred = (self.first, self.since,
                                                 dict(self.counters), self.erred)
        return c

    def saw(self, f: Frame) -> None:
        """``f`` is the node's: its seq, time and energy counters are the newest known."""
        if f.seq > self.seq:
            self.seq, self.seq_ts = f.seq, f.ts
        if f.seq and (not self.first or f.seq < self.first):
            self.first = f.seq
        self.since = min(self.since, f.ts)
        for g in f.gpus:
            c = g.metrics.get("gpu_energy_j")
            if c is not None and c > self.counters.get(g.index, -math.inf):
                self.counters[g.index] = c


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

    def back(self, f: Frame, newest: float, restart: bool, overlaps: bool) -> None:
        if self._count("back", f):
            how = (" and its agent restarted (its seq started again lower)" if restart
                   else "")
            then = ("its samples stamped over times it already sent replace those stored"
                    if overlaps else "it is stamped before any time it sent here, so "
                    "nothing it sent is stamped again")
            log.warning("%s's clock stepped back %.0f s%s (frame seq %d stamped %s after "
                        "one stamped %s): its energy goes on from its counter across the "
                        "step; %s (counted in fleetwatch_processor_clock_steps; said once "
                        "per node). Check the node's time sync (chrony/ntpd)",
                        f.node, newest - f.ts, how, f.seq, _iso(f.ts), _iso(newest), then)

    def error(self, f: Frame, was: float, bound: float) -> None:
        if self._count("error", f):
            log.warning("%s's clock jumped from %s to %s (further than %.0f days, or ahead "
                        "of this processor's clock): a clock error, not an outage; its "
                        "energy starts anew at the new time and the jump is neither energy "
                        "nor missing time (said once per node). Fix the node's clock",
                        f.node, _iso(was), _iso(f.ts), bound / 86400)

    def silence(self, f: Frame, was: float, bound: float) -> None:
        """The node sent nothing for longer than ``bound`` and came back at a time this
        processor's clock has reached: a long outage (a repair, an RMA, a later span
        appended by ``simulate``), not a clock error. Said once per node, at INFO: nothing
        is wrong with the node, but the silence is not in the ledger's missing time."""
        key = ("silence", f.cluster, f.node, "")
        if key in self._said or len(self._said) >= 100_000:
            return
        self._said.add(key)
        log.info("%s sent nothing from %s to %s (%.1f days, longer than the %.0f days the "
                 "ledger books as missing time): its energy starts anew at %s, and that "
                 "silence is not counted as missing GPU time (said once per node)",
                 f.node, _iso(was), _iso(f.ts), (f.ts - was) / 86400, bound / 86400,
                 _iso(f.ts))

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


# An agent ticks at most this often (agent.interval_s is at least 0.05 s): within one
# run its seq goes up by at most this much per second of its clock.
TICKS_PER_S = 20


def in_steps(group: Sequence[Frame], clock: NodeClock, newest: float, steps: ClockSteps,
             max_jump_s: float = math.inf) -> Iterator[tuple[list[Frame], bool]]:
    """A node's frames in arrival order, cut where its clock stepped back: (part, whether
    it begins with a step). Frames of before a step are left out. Updates ``clock``."""
    part: list[Frame] = []
    stepped = False
    for f in group:
        if clock.guard is not None:
            lo, hi, old, since = clock.guard
            if f.ts > old:
                clock.guard = None  # the clock is past the step: nothing overlaps any more
            elif f.seq and not lo <= f.seq < hi:
                continue  # sent before the step, arrived after it: its times are booked
            elif f.ts >= since:
                steps.overlap(f)  # stamped again over a time the node sent
        restart = _restarted(f, clock)
        if (restart or _stepped(f, clock)) and newest - f.ts <= max_jump_s:
            overlaps = f.ts >= clock.since
            steps.back(f, newest, restart, overlaps)
            if part or stepped:
                yield part, stepped
            part, stepped = [], True
            # Frames of the run before the step are passed over while the times overlap:
            # by seq below the step's, or (the agent restarted) at or above that run's.
            clock.guard = (f.seq, clock.first if restart else math.inf, newest, clock.since)
            if restart:
                clock.seq = clock.first = 0  # the new run's seq counts from here
            if overlaps:
                steps.overlap(f)
            newest = f.ts
        part.append(f)
        newest = max(newest, f.ts)
        clock.saw(f)
    if part:
        yield part, stepped


def _stepped(f: Frame, clock: NodeClock) -> bool:
    """Stamped before the frame it follows in seq (not merely before the newest: a batch
    delivered again after a restart goes forward from its own first frame)."""
    return bool(f.seq and clock.seq and f.seq > clock.seq and f.ts < clock.seq_ts)


def _restarted(f: Frame, clock: NodeClock) -> bool:
    """Seq and time both went back, by more seq than one agent run counts in that time
    (a new run: its seq started again from a clock now behind), while the GPUs' energy
    counters ran on: the agent restarted after its clock was stepped back. Frames of an
    earlier run delivered again have their counters behind; a node without counters
    cannot say, and its frames are passed over as delivered again."""
    if not (f.seq and clock.seq and f.seq < clock.seq and f.ts < clock.seq_ts):
        return False
    if clock.seq - f.seq <= TICKS_PER_S * (clock.seq_ts - f.ts) + TICKS_PER_S:
        return False  # one run's frames: delivered again
    ran = False
    for g in f.gpus:
        c, was = g.metrics.get("gpu_energy_j"), clock.counters.get(g.index)
        if c is None or was is None:
            continue
        if c < was:
            return False
        ran = ran or c > was
    return ran


def _iso(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{ts:.0f}"
