"""What ``fleetwatch.recorded`` does to a reading once its files are read: repeated samples
counted, each node's samples gathered into ticks of its interval, and GPUs whose series
stop while their node goes on read as lost. Each says what it did in the reading's notes.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

# A GPU absent from its node's frames for more than this many of its own intervals, and
# for over ``LOST_SILENT_S``, while other GPUs of the node go on, is read as lost. A GPU
# that fell off the bus does not come back by itself (it needs a reset or a reboot), while
# a series that stops for less is a scrape's or an exporter's gap, routine in collected
# data: 5 minutes is Prometheus's own staleness window, after which it too deems a series
# gone. XID 79 says it at once (the agent marks such a GPU lost at its next read).
from fleetwatch.collectors.nvml.reader import LOST_AFTER_INTERVALS, XID_FALLEN_OFF_BUS
from fleetwatch.recorded_values import utc

LOST_SILENT_S = 300.0  # the default of detectors.gpu_lost_silent_s
EPISODES_SHOWN = 5  # lost episodes the summary names (the others it counts)

if TYPE_CHECKING:
    from fleetwatch.recorded_reading import Reading


def note_repeats(out: Reading) -> None:
    note_clock(out)
    if not out.repeats:
        return
    note = (f"{out.repeats:,} repeated sample{'s' if out.repeats != 1 else ''} (the same time, "
            f"node, GPU and metric; the last kept), {out.conflicts:,} with another value")
    if out.conflicts:
        note += (f", e.g. {out.conflict_example}: two sources of one series, or a clock or "
                 "time-zone fault")
        if out.naive_times and out.conflict_fall_back:
            note += ("; times without a zone (read as UTC, see the warning above): local "
                     "times repeat an hour where daylight saving time ends")
    out.notes.append(note)


def note_clock(out: Reading) -> None:
    """Say that times without a zone were read as UTC, and where a series' times went back
    by about an hour where clocks fall back: local times across the end of daylight-saving
    time (replayed as they are, the hour after the change comes before the one it follows,
    or, streamed, rows behind the window are passed over); the advice is said once."""
    if out.naive_times:
        out.notes.append(f"warning: {out.naive_times:,} times have no zone and were read as "
                         f"UTC, e.g. {out.naive_example}; if they are local times, give "
                         "them in UTC or with their offset (2026-11-01T01:30:00-04:00)")
    if out.back_hour:
        n = out.back_hour
        then = ("rows more than the replay's window behind the newest time are passed over "
                "(below)" if out.late else "those rows are replayed in time order, so the "
                "hour after the change comes before the one it follows")
        out.notes.append(f"warning: the times of {n:,} series went back by about an hour at "
                         "night in a month where clocks fall back (a daylight-saving change "
                         f"in local times written without a zone?), e.g. {out.back_example}: "
                         f"{then} (give such times as the warning above says)")


def _median_step(times: list[float]) -> float | None:
    """The median spacing of sorted times (None under two, or where it is 0)."""
    if len(times) < 2:
        return None
    step = statistics.median(b - a for a, b in zip(times, times[1:]))
    return step if step > 0 else None


@dataclass
class TickStats:
    """What ``to_ticks`` did over the runs of a streamed reading, for one note at the end."""

    moved: int = 0
    spread: float = 0.0
    steps: set[float] = field(default_factory=set)


def to_ticks(out: Reading, stats: TickStats | None = None) -> None:
    """Gather each node's samples into ticks of its interval.

    A node's series may carry their own times (DCGM field timestamps, a scrape or an
    export per series), a fraction of a second apart: read as they are, each time made
    a frame of its own with one GPU or one metric, and every rule that compares GPUs of
    a node, or needs two metrics of one GPU, judged nothing. The interval is the
    shortest of the node's series' median spacings; a time joins the tick begun by an
    earlier one under half an interval before it, unless a series of it already has a
    sample in that tick (a sample is never dropped or merged with its own series). The
    tick takes its first time. Exactly aligned data has one time a tick, and is kept.
    An XID is an event, not a sample: it keeps its own time (the kernel's), in a frame of
    its own where no sample shares it, so its stored event and alert say when it happened.
    """
    stamps: dict[str, dict[float, set[tuple[int | None, str]]]] = defaultdict(dict)
    for (ts, node), per_gpu in out.samples.items():
        keys = stamps[node].setdefault(ts, set())
        for gpu, metrics in per_gpu.items():
            keys.update((gpu, m) for m in metrics)
    moved: dict[tuple[float, str], float] = {}
    steps: set[float] = set()
    before = after = 0
    for node, at in stamps.items():
        ordered = sorted(at.items())
        series: dict[tuple[int | None, str], list[float]] = defaultdict(list)
        for ts, keys in ordered:
            for key in keys:
                series[key].append(ts)
        found = [s for s in map(_median_step, series.values()) if s is not None]
        if not found:
            continue
        step = min(found)
        start, held = -math.inf, set[tuple[int | None, str]]()
        ticks = 0
        for ts, keys in ordered:
            if ts - start < step / 2 and held.isdisjoint(keys):
                held |= keys
                moved[(ts, node)] = start
            else:
                start, held = ts, set(keys)
                ticks += 1
        if ticks < len(ordered):
            steps.add(step)
            before, after = before + len(ordered), after + ticks
    if not moved:
        return
    spread = max(ts - tick for (ts, _), tick in moved.items())
    if stats is not None:  # a streamed run: counted, said once at the end (note_ticks)
        stats.moved += len(moved)
        stats.spread = max(stats.spread, spread)
        # The note says the shortest and longest only; every one kept grew with the file.
        both = stats.steps | steps
        stats.steps = {min(both), max(both)}
    for (ts, node), tick in moved.items():
        for gpu, metrics in out.samples.pop((ts, node), {}).items():
            out.samples[(tick, node)][gpu].update(metrics)
    for (ts, node, gpu) in [k for k in out.jobs if (k[0], k[1]) in moved]:
        out.jobs[(moved[(ts, node)], node, gpu)] = out.jobs.pop((ts, node, gpu))
    if stats is not None:
        return
    every = _every(steps)
    out.notes.append(f"the series of a node carry their own times, up to {spread:.3g} s "
                     f"apart within one interval ({every}, the median spacing of its "
                     f"series): {before:,} times read as {after:,} ticks, each at its first "
                     "time, so that a node's GPUs and metrics meet in one frame")


def _every(steps: set[float]) -> str:
    return (f"{min(steps):g} s" if len(steps) == 1
            else f"{min(steps):g} to {max(steps):g} s")


def note_ticks(out: Reading, stats: TickStats) -> None:
    if stats.moved:
        out.notes.append(f"the series of a node carry their own times, up to "
                         f"{stats.spread:.3g} s apart within one interval "
                         f"({_every(stats.steps)}, the median spacing of its series): "
                         f"{stats.moved:,} times joined the tick of an earlier time, so that "
                         "a node's GPUs and metrics meet in one frame")


@dataclass
class LostState:
    """``mark_lost`` across the chunks of a streamed reading: per node, each GPU's last
    sample, own interval, since when it is read as lost, and whether it reported XID 79."""

    last: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    steps: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    since: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    off_bus: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    # The first ``EPISODES_SHOWN`` episodes ended, the ones the note names, and how many
    # ended in all: a long churned recording has GPUs lost and back by the hundred thousand.
    episodes: list[str] = field(default_factory=list)
    ended: int = 0
    silent_s: float = LOST_SILENT_S


def mark_lost(out: Reading, state: LostState | None = None) -> None:
    """A GPU absent from its node's frames for over ``LOST_AFTER_INTERVALS`` of its own
    intervals and over ``state.silent_s``, while other GPUs of the node go on, is lost in
    those frames, until it is back (its alert then ends at once: gpu_errors).

    That is how a GPU that fell off the bus (XID 79) looks in a recording: its series
    stop, its node's go on. The agent reports such a GPU as state "lost", which the
    gpu_lost rule judges; a recording has no GPU state, so it is read from the gaps. A
    node whose GPUs all stop, or whose recording ends, has no GPU going on: not lost. A
    GPU that reported XID 79 is lost at its first tick without a sample, as the agent
    marks it at once.
    """
    present: dict[str, dict[float, set[int]]] = defaultdict(dict)
    for (ts, node), per_gpu in out.samples.items():
        gpus = {g for g, metrics in per_gpu.items() if g is not None and metrics}
        if gpus:
            present[node].setdefault(ts, set()).update(gpus)
    # A GPU that reported XID 79 (fallen off the bus) is lost from its next tick without a
    # sample, as the agent reports it at once (collectors.nvml.reader), not 3 intervals on.
    fallen: dict[str, dict[float, set[int]]] = defaultdict(dict)
    for (ts, node, gpu), codes in out.xids.items():
        present[node].setdefault(ts, set()).add(gpu)
        if XID_FALLEN_OFF_BUS in codes:
            fallen[node].setdefault(ts, set()).add(gpu)
    whole = state is None
    state = state or LostState(silent_s=out.lost_silent_s)
    for node, at in sorted(present.items()):
        times = sorted(at)
        last = state.last[node]
        seen: dict[int, list[float]] = defaultdict(list)
        for gpu, ts in last.items():
            seen[gpu].append(ts)   # the gap to the last chunk's sample counts too
        for ts in times:
            for gpu in at[ts]:
                seen[gpu].append(ts)
        own = state.steps[node]
        own.update({gpu: s for gpu, s in ((g, _median_step(t)) for g, t in seen.items())
                    if s is not None})
        node_step = min(own.values(), default=None)
        since = state.since[node]      # GPU -> when it was first read as lost, this time
        off_bus = state.off_bus[node]  # GPUs whose last XID was 79, until they are back
        for ts in times:
            here = at[ts]
            listed = out.listed.get((ts, node))  # the agent's frame: a GPU it left out is absent
            for gpu, seen_ts in last.items():
                step = own.get(gpu) or node_step
                if listed is not None and gpu not in listed:
                    continue
                if gpu not in here and (gpu in off_bus or step and ts - seen_ts > max(
                        LOST_AFTER_INTERVALS * step, state.silent_s)):
                    out.lost[(ts, node)].add(gpu)
                    since.setdefault(gpu, ts)
            off_bus -= here
            off_bus |= fallen[node].get(ts, set())
            for gpu in here:
                if gpu in since:
                    began = since.pop(gpu)
                    state.ended += 1
                    if len(state.episodes) < EPISODES_SHOWN:
                        state.episodes.append(f"{node} GPU {gpu} from {utc(began)} until "
                                              f"it came back at {utc(ts)}")
                last[gpu] = ts
        # An empty set or dict a node is 64 to 216 bytes, for every node name a churning
        # pool ever had: only a node with a GPU lost or off the bus keeps one.
        if not since:
            del state.since[node]
        if not off_bus:
            del state.off_bus[node]
    if whole:
        note_lost(out, state)


def note_lost(out: Reading, state: LostState) -> None:
    still = [(node, gpu, t) for node, lost in sorted(state.since.items())
             for gpu, t in sorted(lost.items())]
    episodes = state.episodes + [
        f"{node} GPU {gpu} from {utc(t)} to the end (last sample {utc(state.last[node][gpu])})"
        for node, gpu, t in still[:max(0, EPISODES_SHOWN - len(state.episodes))]]
    count = state.ended + len(still)
    if count:
        shown = "; ".join(episodes) + (f"; and {count - EPISODES_SHOWN} more"
                                       if count > EPISODES_SHOWN else "")
        out.notes.append(
            f"GPUs read as lost (their samples stopped for over {state.silent_s:g} s and "
            f"{LOST_AFTER_INTERVALS} of their intervals while other GPUs of their node went "
            f"on, as a GPU that fell off the bus does, or at once after its XID 79): {shown}")
