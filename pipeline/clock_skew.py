"""Frames against the processor's own clock: agents whose clocks are wrong.

Agents stamp each frame with their node's clock, and the codec takes any time
between 2000 and 2100. A frame stamped ahead of the processor's clock can only
come from a wrong clock (delivery makes frames late, never early); one far
ahead would sit in the store, the energy ledger and the detectors' state as the
newest thing they know. ``ClockWatch.check`` tells the processor which frames of
a batch are further ahead than ``max_ahead_s`` (it quarantines them as dead
letters) and which nodes run ahead by more than ``AHEAD_WARN_S``, or steadily
far behind the fleet while arriving (a clock behind, not a late flush: a spool
that flushes catches up, a clock behind stays as far behind). "The fleet" is the
newest frame time seen of any node in step, never past the processor's clock: a
batch of one node's frames (a live processor's usual poll) is no reference.

A node whose frames are refused (further ahead than ``max_ahead_s``) or steadily
further behind than ``BEHIND_WARN_S`` is also a ``node_clock_skew`` alert
(``Verdict.skewed``, made findings by ``skew_findings``): the first sends nothing
any detector sees, the second is stored at the wrong time, and neither may be silent.

Each node is said once when it goes off (``lines``) and once when it is back in
step; ``offsets`` holds the nodes off now, at most ``MAX_NODES`` of them (the
furthest off; one that sent nothing for ``FORGET_S`` leaves), for the metric that
finds them. Pure logic: the wall clock is an argument.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from fleetwatch.frame import Frame
from fleetwatch.models import Finding

AHEAD_WARN_S = 10.0      # a frame this far ahead of the processor: its node's clock is off
BEHIND_WARN_S = 300.0    # a node this far behind the batch's median, steadily: the same
STEADY_S = 60.0          # ... for this long of the processor's time,
STEADY_TOL_S = 10.0      # ... its offset moving less than this (a flush catches up)
# A node: its cluster and its name (node001 is a name in every cluster).
NodeKey = tuple[str, str]
MAX_NODES = 50           # nodes in the offset metric: the furthest off
MAX_REMEMBERED = 100_000  # nodes whose state is kept (said once each)
FORGET_S = 3600.0        # a node off that sent nothing for this long leaves the metric
REFUSED_FOR_S = 60.0     # a node's frames refused this long: its node_clock_skew fires
# A node whose frames were refused and that has sent none for this long (of the processor's
# clock) has stopped: its node_clock_skew ends (it is judged silent instead, a limit after
# its last frame arrived: ``Verdict.heard``).
REFUSED_GONE_S = 120.0


@dataclass
class Verdict:
    """One batch's: per frame, the reason it is quarantined ("" where kept), lines to
    log (level, text), and how many frames ran ahead (quarantined or not) and behind."""

    reasons: list[str]
    lines: list[tuple[int, str]] = field(default_factory=list)
    ahead: int = 0
    behind: int = 0
    # Frames of nodes whose clock is off enough to page: (frame, offset, refused); every
    # frame of a node behind (its alert is judged at each), the newest of one refused.
    skewed: list[tuple[Frame, float, bool]] = field(default_factory=list)
    # Nodes refused: (cluster, rack, node, the stream's time it arrived), so that the silence
    # detector knows it was heard of (``expect``) and pages it if it stops.
    heard: list[tuple[str, str, str, float]] = field(default_factory=list)
    # Nodes refused before that have sent nothing for ``REFUSED_GONE_S``: their skew ends.
    gone: list[Frame] = field(default_factory=list)


class ClockWatch:
    """See the module. ``max_ahead_s`` 0: no frame is quarantined for its time."""

    def __init__(self, max_ahead_s: float = 300.0) -> None:
        self.max_ahead_s = max_ahead_s
        self.offsets: dict[NodeKey, float] = {}          # node -> its offset, nodes off now
        self._seen: dict[NodeKey, float] = {}            # node in offsets -> our clock then
        self._behind: dict[NodeKey, tuple[float, float]] = {}  # node -> (since, offset then)
        self._off: set[NodeKey] = set()                  # nodes said to be off
        self._front = -math.inf  # the newest frame time of a node in step (<= our clock)
        self._refused: dict[NodeKey, tuple[float, Frame]] = {}  # -> our clock, its frame

    def check(self, frames: Sequence[Frame], wall: float) -> Verdict:
        verdict = Verdict([self._quarantine(f, wall) for f in frames])
        verdict.ahead = sum(1 for f in frames if f.ts - wall > AHEAD_WARN_S)
        newest: dict[NodeKey, Frame] = {}
        for f in frames:
            key = (f.cluster, f.node)
            if key not in newest or f.ts > newest[key].ts:
                newest[key] = f
            if f.ts - wall <= AHEAD_WARN_S:
                self._front = max(self._front, min(f.ts, wall))
        front = self._front if self._front > -math.inf else wall
        for node, f in newest.items():
            ahead = f.ts - wall
            if ahead > AHEAD_WARN_S:
                self._going_off(f, ahead, "ahead of this processor's clock", verdict, wall)
                if self.max_ahead_s and ahead > self.max_ahead_s:
                    verdict.skewed.append((f, ahead, True))
                    verdict.heard.append((f.cluster, f.rack, f.node, self.now(wall)))
                    if node in self._refused or len(self._refused) < MAX_REMEMBERED:
                        self._refused[node] = (wall, f)
            elif self._steadily_behind(node, f.ts - front, wall):
                verdict.behind += 1
                self._going_off(f, f.ts - front, "behind the other nodes' (while they "
                                "arrive with it)", verdict, wall)
                verdict.skewed += [(g, f.ts - front, False) for g in frames
                                   if (g.cluster, g.node) == node]
            elif node in self._off and f.ts - front >= -BEHIND_WARN_S:
                self._off.discard(node)
                self.offsets.pop(node, None)
                self._seen.pop(node, None)
                verdict.lines.append((logging.INFO, f"{_where(f)}: its frames are in step "
                                      "with this processor's clock again"))
        refused_now = {(c, x) for c, _, x, _ in verdict.heard}
        for node in [n for n in self._refused if n in newest and n not in refused_now]:
            del self._refused[node]  # a frame kept: in step again (its own frame resolves)
        for node, (at, f) in list(self._refused.items()):
            if wall - at > REFUSED_GONE_S:
                verdict.gone.append(f)
                del self._refused[node]
        for node in [n for n, at in self._seen.items() if wall - at > FORGET_S]:
            self.offsets.pop(node, None)   # gone quiet: no longer "off now"
            del self._seen[node]
        return verdict

    def now(self, wall: float) -> float:
        """The stream's time: the newest frame time of a node in step, at most ``wall``."""
        return min(self._front, wall) if self._front > -math.inf else wall

    def _quarantine(self, f: Frame, wall: float) -> str:
        ahead = f.ts - wall
        if not self.max_ahead_s or ahead <= self.max_ahead_s:
            return ""
        return (f"{_where(f)}: frame stamped {_iso(f.ts)} is {_amount(ahead)} ahead of this "
                f"processor's clock ({_iso(wall)}), more than processor.max_clock_ahead_s "
                f"({self.max_ahead_s:g} s): the node's clock is wrong. Fix its time sync "
                "(chronyc tracking / timedatectl on the node); its frames are taken again "
                "once its clock is right")

    def _steadily_behind(self, node: NodeKey, offset: float, wall: float) -> bool:
        if offset >= -BEHIND_WARN_S:
            self._behind.pop(node, None)
            return False
        if node in self._off and node in self._behind:
            return True  # said behind, still behind: until in step again, however it moves
        since = self._behind.get(node)
        if since is None or abs(offset - since[1]) > STEADY_TOL_S:
            if len(self._behind) < MAX_REMEMBERED:
                self._behind[node] = (wall, offset)
            return False
        return wall - since[0] >= STEADY_S

    def _going_off(self, f: Frame, offset: float, how: str, verdict: Verdict,
                   wall: float) -> None:
        key = (f.cluster, f.node)
        self._remember(key, offset, wall)
        if key in self._off or len(self._off) >= MAX_REMEMBERED:
            return
        self._off.add(key)
        verdict.lines.append((logging.WARNING, (
            f"{_where(f)}: its clock is {_amount(offset)} {how}: fix its time sync (NTP: "
            "chronyc tracking / timedatectl on the node). Said once per node; "
            "fleetwatch_processor_node_clock_offset_seconds shows the nodes off now")))

    def _remember(self, node: NodeKey, offset: float, wall: float) -> None:
        self.offsets[node] = offset
        self._seen[node] = wall
        if len(self.offsets) > MAX_NODES:  # keep the furthest off
            nearest = min(self.offsets, key=lambda n: abs(self.offsets[n]))
            del self.offsets[nearest]
            self._seen.pop(nearest, None)


def gone_findings(gone: Sequence[Frame], now: float) -> list[Finding]:
    """The findings that end the ``node_clock_skew`` of refused nodes that stopped sending
    (pending or firing): no frame of theirs will come to resolve it; ``node_silent`` says
    they stopped."""
    return [Finding(
        "node_clock_skew", f.cluster, f.rack, f.node, None, now, math.nan,
        f"{f.node}: no frame of it for {REFUSED_GONE_S:.0f} s (its last ones were refused "
        "for their clock): it stopped sending, which node_silent says", "critical",
        action="See its node_silent alert", scope="node", resolves=True) for f in gone]


def skew_findings(skewed: Sequence[tuple[Frame, float, bool]], now: float) -> list[Finding]:
    """``node_clock_skew`` findings, one a node: critical for a node whose frames are
    refused (none of its GPUs is watched) once that has lasted ``REFUSED_FOR_S`` (one stray
    frame pages nobody); warning for one steadily behind. Both judged at ``now`` (the
    fleet's time, never a wrong clock's: an alert of a node behind stamped at its own
    clock started before it was seen); its first frame in step resolves it (its frames
    while behind are older than the alert's time, so they judge nothing)."""
    out = []
    newest: dict[tuple[str, str], tuple[Frame, float, bool]] = {}
    for f, offset, refused in skewed:
        key = (f.cluster, f.node)
        if key not in newest or f.ts > newest[key][0].ts:
            newest[key] = (f, offset, refused)
    for f, offset, refused in newest.values():
        how = "ahead of this processor's clock" if offset > 0 else "behind the other nodes'"
        what = ("its frames are refused (dead letters, field clock): none of its GPUs is "
                "watched" if refused else "its frames are stored and judged at its wrong time")
        out.append(Finding(
            "node_clock_skew", f.cluster, f.rack, f.node, None, now,
            round(offset, 1), f"{f.node}: its clock is {_amount(offset)} {how}; {what}",
            "critical" if refused else "warning", REFUSED_FOR_S if refused else 0.0,
            evidence={"offset_s": round(offset, 1)},
            action="Fix NTP/chrony on the node (chronyc tracking, timedatectl); its frames "
                   "are in step again once its clock is right", scope="node"))
    return out


def _where(f: Frame) -> str:
    return f"{f.cluster}/{f.rack}/{f.node}"


def _amount(seconds: float) -> str:
    size = abs(seconds)
    if size >= 86400:
        return f"{size / 86400:.1f} days"
    return f"{size / 3600:.1f} h" if size >= 3600 else f"{size:.0f} s"


def _iso(ts: float) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    except (OverflowError, OSError, ValueError):
        return f"{ts:.0f} (epoch seconds)"
