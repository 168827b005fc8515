"""``fleetwatch replay FILE...``: recorded telemetry through the processor and detectors.

The frames read by ``fleetwatch.recorded`` go, one timestamp per batch, through
the same ``Processor``, detectors and alert lifecycle as live data, as fast
as they can, or paced at ``speed`` times real time. Every alert transition is
printed as one JSON line (the ``change_json`` form the sinks use). The summary
(``fleetwatch.replay_coverage``) says what the data held, on what share of the
GPU samples each rule could judge anything and why not, which thermal limits
were assumed, and whether the learned detectors ran.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from fleetwatch.frame import Frame
from fleetwatch.models import Detector
from fleetwatch.parts import tdp_w, thermal_limits_c
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.base import change_json
from fleetwatch.pipeline.store.base import Alert, Store
from fleetwatch.recorded import ReplayError, Series, read_files
from fleetwatch.recording import RecordingStore
from fleetwatch.replay_coverage import EXAMPLE_MODEL, Coverage, ReplaySummary

__all__ = ["JsonLinesSink", "ReplayError", "ReplaySummary", "Series", "replay"]


class JsonLinesSink:
    """An ``AlertSink`` that writes each change as one JSON line."""

    name = "jsonl"
    notify_only = False

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.written = 0
        self.fired = 0  # alerts that fired (an alert's id is its own: it names its start)
        self.last: dict[str, Notice] = {}  # alert id -> its last line, while open

    def send(self, changes: Sequence[Notice]) -> None:
        for n in changes:
            self.written += 1
            before = self.last.get(n.alert.id)
            if n.alert.fired_ts is not None and (before is None
                                                 or before.alert.fired_ts is None):
                self.fired += 1
            if n.alert.state == "resolved":
                self.last.pop(n.alert.id, None)
            else:
                self.last[n.alert.id] = n
            self.out.write(json.dumps(change_json(n), sort_keys=True) + "\n")
        self.out.flush()

    def final(self, open_: Sequence[Alert]) -> None:
        """The alerts still open when the data ends, once more where they changed since
        their last line (an XID alert's count, which the notifier does not forward while
        its state stays the same): stdout ends with what the store holds."""
        for a in open_:
            if a.id in self.last and self.last[a.id].alert != a:
                line = {**change_json(Notice(a, self.last[a.id].muted_by)),
                        "open_at_end": True}  # no transition: a scorer can tell it apart
                self.out.write(json.dumps(line, sort_keys=True) + "\n")
        self.out.flush()

    def close(self) -> None:
        pass


def check_gpu_model(name: str) -> None:
    """``--gpu-model``: a product name fleetwatch knows (``fleetwatch.parts``), or an error."""
    if thermal_limits_c(name) is None and tdp_w(name) is None:
        raise ReplayError(f"--gpu-model {name!r}: no GPU part fleetwatch knows by that name; give "
                          f"the product name as nvidia-smi prints it, e.g. '{EXAMPLE_MODEL}', "
                          "'NVIDIA A100-SXM4-80GB' or 'NVIDIA A10G' (fleetwatch/parts.py)")


def _learned(detectors: Sequence[Detector], summary: ReplaySummary) -> None:
    """Whether the learned detectors ran, and if not, why; their rules without a model are
    reported not judged."""
    learned = [d for d in detectors if getattr(d, "name", "") == "learned"]
    if not learned:
        summary.notes.append("learned detectors (thermal_health, fleet_anomaly, lemon_node): not "
                             "run, only the rules were given; `fleetwatch replay --models` adds "
                             "them, with the newest model file in models.dir")
        return
    d: Any = learned[0]
    from fleetwatch.models.learned import _has_model

    idle = [rule for part in (d.thermal, d.anomaly) if not _has_model(part.model)
            for rule in part.rules]
    for rule, why_not in getattr(d, "not_judged", {}).items():  # GPUs of another kind
        if rule in summary.coverage and rule not in idle:
            summary.unjudged[rule] = why_not
    if d.loaded is None:
        files = sorted(Path(d.directory).glob("*.fwm")) if Path(d.directory).is_dir() else []
        why = (f"no model file in {d.directory} loads (the warnings above say why)" if files
               else f"no model file in {d.directory} (`fleetwatch train` writes one)")
    else:
        why = f"the model file {d.loaded} holds no model for it (too little history of it)"
    gaps = getattr(getattr(d.anomaly, "model", None), "missing", lambda: [])()
    if "fleet_anomaly" not in idle and gaps and "fleet_anomaly" in summary.coverage:
        summary.notes.append(f"fleet_anomaly: the model file {d.loaded} holds no model of "
                             f"{', '.join(gaps)} work: GPUs doing it were not scored")
    for rule in idle:
        if rule in summary.coverage:
            summary.coverage[rule] = 0.0
            summary.unjudged[rule] = why
    if not idle:
        summary.notes.append(f"learned detectors: ran, with the model file {d.loaded}")
    else:
        summary.notes.append(f"learned detectors: {', '.join(idle)} not run: {why}; "
                             "lemon_node ran")


def _counts(detectors: Sequence[Detector]) -> dict[str, tuple[int, int]]:
    """Every rule's (GPU samples judged, GPU samples given), where its detector counts them
    (``coverage()``), summed over the detectors that do."""
    out: dict[str, tuple[int, int]] = {}
    for d in detectors:
        count = getattr(d, "coverage", None)
        if callable(count):
            for rule, (judged, given) in count().items():
                j, g = out.get(rule, (0, 0))
                out[rule] = (j + judged, g + given)
    return out


def _counted(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
             summary: ReplaySummary) -> None:
    """A detector's own count of what it judged replaces the estimate from the data's shape
    (``replay_reach.REACH``), which cannot see its conditions: a rack model that judges only
    GPUs whose power has settled judged 0.1% of the samples that the estimate put at 100%."""
    for rule, (judged, given) in after.items():
        if rule not in summary.coverage:
            continue
        j0, g0 = before.get(rule, (0, 0))
        judged, given = judged - j0, given - g0
        share = judged / given if given > 0 else 0.0
        estimate = summary.coverage[rule]
        summary.coverage[rule] = share
        summary.counted.add(rule)
        if given <= 0:
            summary.unjudged.setdefault(rule, "the detector was given no GPU sample")
        elif share < 1 and not (rule in summary.unjudged and share <= estimate):
            # Keep what the data lacked where it explains the count (no more than estimated).
            summary.unjudged[rule] = ("the detector's own conditions did not hold "
                                      "(e.g. its warm-up, a load steady for long enough, or "
                                      "power in the data)")


def replay(paths: Sequence[str | Path], detectors: Sequence[Detector], out: TextIO = sys.stdout,
           speed: float | None = None, skip_bad: bool = False, store: Store | None = None,
           cluster: str = "replay", rack: str = "unknown",
           sleep: Callable[[float], None] = time.sleep,
           clock: Callable[[], float] = time.monotonic,
           keep_firing_s: float = 0.0, series: Series | None = None,
           gpu_model: str = "", lost_silent_s: float = 300.0) -> ReplaySummary:
    """Replay the files; print transitions to ``out``; return what happened.

    ``speed``: None or inf for as fast as possible, else that many times real time.
    ``series``: what one-series files (``timestamp,value``) measure, and whose they are.
    ``gpu_model``: the GPUs' product name where the data gives none (its thermal limits
    stand in where the data has no NVML thresholds).
    Raises ``ReplayError`` for a file that cannot be read or (without ``skip_bad``)
    a bad row, naming the file and line.
    """
    if speed is not None and not (speed > 0):
        raise ReplayError(f"--speed {speed!r}: must be above 0 (e.g. 1 for real time, 60 for "
                          "a minute a second); leave it out to replay as fast as possible")
    if gpu_model:
        check_gpu_model(gpu_model)
    summary = ReplaySummary()
    coverage = Coverage(detectors)
    sink = JsonLinesSink(out)
    # Silences are read again, and every open alert's muting judged again (an inhibition
    # that began without the alert changing), every reload_s of the data's time, as live:
    # on the wall's, a replay's lines would depend on how fast the machine replays.
    notifier = Notifier([sink], background=False, clock=lambda: summary.end_ts)
    # So are the learned detectors' looks for a newer model file and their lemon scores'
    # "now" (how far a node's stored events are read).
    for d in detectors:
        use_clock = getattr(d, "use_clock", None)
        if callable(use_clock):
            use_clock(lambda: summary.end_ts)
    # No alert history: the sink prints each change as it comes; the store keeps the open.
    processor = Processor(store if store is not None else RecordingStore(history=False),
                          detectors, notify=notifier.send, keep_firing_s=keep_firing_s)
    before = _counts(detectors)
    wall0 = clock()
    paced = speed is not None and math.isfinite(speed)

    def play(batches: list[list[Frame]]) -> None:
        """Frames as they are read: one file is replayed while the rest is being read."""
        for batch in batches:
            if not summary.frames:
                summary.start_ts = batch[0].ts
            summary.end_ts = batch[0].ts
            coverage.see(batch)
            if paced:
                due = wall0 + (batch[0].ts - summary.start_ts) / speed  # type: ignore[operator]
                if due > clock():
                    sleep(due - clock())
            processor.process(batch)
            summary.frames += len(batch)

    reading = read_files(paths, skip_bad, cluster, rack, series, emit=play, model=gpu_model,
                         lost_silent_s=lost_silent_s)
    summary.bad_rows, summary.bad_examples = reading.bad_rows, reading.bad_examples
    summary.late_rows = reading.late
    summary.notes = list(reading.notes)
    if not summary.frames:
        summary.notes.append("no samples in the files")
        return summary
    coverage.done(summary, reading.xid_channel)
    processor.flush()  # the last counts of open alerts, which no later frame writes
    # In the order they opened: the book's own order follows the hashing of its keys,
    # which differs from run to run.
    sink.final(sorted(processor.alerts.open, key=lambda a: (a.started_ts, a.id)))
    summary.transitions, summary.firing = sink.written, sink.fired
    notifier.close()
    _counted(before, _counts(detectors), summary)
    _learned(detectors, summary)
    return summary
