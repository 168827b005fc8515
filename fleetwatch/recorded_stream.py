"""Replay one recorded file as it is read: memory bounded by a window of time, not the file.

``fleetwatch.recorded`` reads a file into a ``Reading``; here its older part is sealed
into frames and handed on while the rest is still being read. A row may come up to
``window_s`` (recorded time) behind the newest time read so far: rows out of order
within that (a file sorted per node, or per metric within a tick, repeated times) are
read as in a whole-file read. A row further behind belongs to a time already replayed:
it is counted and passed over, and the summary says how many and what to do (sort the
file by time). A file whose times all fit in one window is read whole, exactly as
before. Several files (AcmeTrace's layout: one file per metric, each over the whole
span) are read whole: their rows come in time order only across all of them.

What the whole-file read does once all is read is done per sealed part, carrying what
it needs from the parts before: XID_ERRORS samples become events in time order,
samples are gathered into ticks (each node's interval measured within the window),
a GPU whose samples stop is read as lost (``recorded_ticks.LostState``), and every
frame of a node lists every GPU the node has shown so far or within the window ahead.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

from fleetwatch.frame import Frame
from fleetwatch.recorded import frames
from fleetwatch.recorded_reading import Reading
from fleetwatch.recorded_ticks import (
    LostState,
    TickStats,
    mark_lost,
    note_lost,
    note_repeats,
    note_ticks,
    to_ticks,
)

WINDOW_S = 600.0   # how far (recorded time) a row may come behind the newest one read
Emit = Callable[[list[list[Frame]]], None]


class Stream:
    """Seals a reading's older part into frames, every ``window_s`` of recorded time."""

    def __init__(self, out: Reading, emit: Emit, model: str = "",
                 window_s: float = WINDOW_S) -> None:
        self.out, self.emit, self.model, self.window_s = out, emit, model, window_s
        self.next_seal = math.inf
        self.parts = 0
        self.lost = LostState(silent_s=out.lost_silent_s)
        self.ticks = TickStats()
        self.xid_last: dict[tuple[str, int], int] = {}
        self.known: dict[str, set[int]] = defaultdict(set)
        out.sealer = self._newest

    def _newest(self, ts: float) -> None:
        if self.next_seal == math.inf:
            self.next_seal = ts + 2 * self.window_s
        elif ts >= self.next_seal:
            self._seal(ts - self.window_s)
            self.next_seal = ts + self.window_s

    def finish(self) -> None:
        """Seal what is left once every row is read, and write the notes."""
        from fleetwatch.recorded import _note_zero_absent, _xid_events

        out = self.out
        out.sealer = None
        if not self.parts:  # it all fit in one window: the whole-file read, as it was
            _xid_events(out)
            _note_zero_absent(out)
            note_repeats(out)
            to_ticks(out)
            mark_lost(out)
            self.emit(frames(out, self.model))
            return
        self._seal(math.inf)
        _note_zero_absent(out)
        note_repeats(out)
        note_ticks(out, self.ticks)
        note_lost(out, self.lost)
        if out.late:
            out.notes.append(
                f"{out.late:,} row{'s' if out.late != 1 else ''} came more than "
                f"{self.window_s:g} s (recorded time) behind the newest time read, after "
                f"that time was replayed, and were passed over, e.g. {out.late_example}: "
                "the file is not in time order; sort it by time first, e.g. "
                "(head -1 F; tail -n +2 F | sort -t, -k1,1n) > sorted.csv for epoch times")

    def _seal(self, upto: float) -> None:
        """Replay the reading's ticks before ``upto``; later rows before it are late."""
        out = self.out
        self._xid_events(upto)
        to_ticks(out, self.ticks)   # the whole window: a tick takes its later members
        part = Reading(xid_channel=out.xid_channel)
        for key in [k for k in out.samples if k[0] < upto]:
            part.samples[key] = out.samples.pop(key)
        for key in [k for k in out.xids if k[0] < upto]:
            part.xids[key] = out.xids.pop(key)
        for key in [k for k in out.jobs if k[0] < upto]:
            part.jobs[key] = out.jobs.pop(key)
        for key in [k for k in out.listed if k[0] < upto]:
            part.listed[key] = out.listed.pop(key)
        part.models, part.places, part.boards = out.models, out.places, out.boards
        part.names = out.names
        # Every GPU a node shows within the window ahead is listed from now on.
        for (_, node), per_gpu in out.samples.items():
            self.known[node].update(g for g in per_gpu if g is not None)
        for _, node, gpu in out.xids:
            self.known[node].add(gpu)
        mark_lost(part, self.lost)
        out.horizon = max(out.horizon, upto)
        self.parts += 1
        batches = frames(part, self.model, self.known)
        if batches:
            self.emit(batches)

    def _xid_events(self, upto: float) -> None:
        """XID_ERRORS samples before ``upto`` as events, carrying each GPU's last code."""
        out = self.out
        for key, codes in out.xid_last.items():
            last = self.xid_last.get(key, 0)
            for ts in sorted(t for t in codes if t < upto):
                code = codes.pop(ts)
                if code and code != last:
                    out.xids[(ts, *key)].append(code)
                last = code
            self.xid_last[key] = last
