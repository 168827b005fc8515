"""``fleetwatch replay FILE...``: recorded telemetry through the processor and detectors.

The frames read by ``fleetwatch.recorded`` go, one timestamp per batch, through
the same ``Processor``, detectors and alert lifecycle as live data, as fast
as they can, or paced at ``speed`` times real time. Every alert transition is
printed as one JSON line (the ``change_json`` form the sinks use). The
summary says what the data held, and which detector rules could not judge
anything for lack of a metric: real recordings carry only some metrics.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from fleetwatch.frame import Frame
from fleetwatch.models import Detector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.base import change_json
from fleetwatch.pipeline.store.base import Store
from fleetwatch.recorded import ReplayError, Series, frames, read_files
from fleetwatch.recording import RecordingStore

__all__ = ["JsonLinesSink", "ReplayError", "ReplaySummary", "Series", "replay"]


class JsonLinesSink:
    """An ``AlertSink`` that writes each change as one JSON line."""

    name = "jsonl"
    notify_only = False

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.written = 0
        self.fired: set[str] = set()

    def send(self, changes: Sequence[Notice]) -> None:
        for n in changes:
            self.written += 1
            if n.alert.fired_ts is not None:
                self.fired.add(n.alert.id)
            self.out.write(json.dumps(change_json(n), sort_keys=True) + "\n")
        self.out.flush()

    def close(self) -> None:
        pass


@dataclass
class ReplaySummary:
    frames: int = 0
    gpus: int = 0
    start_ts: float = 0.0
    end_ts: float = 0.0
    transitions: int = 0
    firing: int = 0
    bad_rows: int = 0
    bad_examples: list[str] = field(default_factory=list)
    metrics: dict[str, int] = field(default_factory=dict)   # metric -> GPU/host samples
    # rule -> share of GPU samples on which its detector had every metric it needs
    coverage: dict[str, float] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)  # rule -> metrics absent
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        span = self.end_ts - self.start_ts
        out = [f"replayed {self.frames:,} frames of {self.gpus:,} GPUs over {span / 3600:.2f} h: "
               f"{self.transitions} alert transitions, {self.firing} alerts fired"]
        if self.bad_rows:
            out.append(f"skipped {self.bad_rows} bad rows, e.g. " + "; ".join(self.bad_examples))
        out.append("metrics in the data: " + (", ".join(
            f"{m} ({n:,})" for m, n in sorted(self.metrics.items())) or "none"))
        for rule, share in sorted(self.coverage.items()):
            lacked = self.missing.get(rule)
            out.append(f"  {rule}: judged {share:.0%} of GPU samples"
                       + (f"; lacked {', '.join(lacked)}" if lacked else ""))
        out += self.notes
        return out


def needs_of(detectors: Sequence[Detector]) -> dict[str, tuple[str, ...]]:
    return {rule: tuple(m) for d in detectors for rule, m in getattr(d, "rules", {}).items()}


def _coverage(batches: Sequence[Sequence[Frame]], detectors: Sequence[Detector],
              summary: ReplaySummary) -> None:
    """What the data held, and for each rule the share of GPU samples it could judge."""
    seen: dict[str, int] = {}
    judged = dict.fromkeys(needs_of(detectors), 0)
    needs = needs_of(detectors)
    samples = 0
    gpus = set()
    for batch in batches:
        for f in batch:
            host = f.host.metrics
            for m in host:
                seen[m] = seen.get(m, 0) + 1
            for g in f.gpus:
                samples += 1
                gpus.add((f.node, g.index))
                metrics = g.metrics
                for m in metrics:
                    seen[m] = seen.get(m, 0) + 1
                if g.xids:
                    seen["xid"] = seen.get("xid", 0) + len(g.xids)
                for rule, wanted in needs.items():
                    if all(m in metrics or m in host for m in wanted):
                        judged[rule] += 1
    summary.gpus = len(gpus)
    summary.metrics = dict(seen)
    for rule, metrics in needs.items():
        summary.coverage[rule] = judged[rule] / samples if samples else 0.0
        lacked = [m for m in metrics if m not in seen]
        if lacked:
            summary.missing[rule] = lacked


def replay(paths: Sequence[str | Path], detectors: Sequence[Detector], out: TextIO = sys.stdout,
           speed: float | None = None, skip_bad: bool = False, store: Store | None = None,
           cluster: str = "replay", rack: str = "unknown",
           sleep: Callable[[float], None] = time.sleep,
           clock: Callable[[], float] = time.monotonic,
           keep_firing_s: float = 0.0, series: Series | None = None) -> ReplaySummary:
    """Replay the files; print transitions to ``out``; return what happened.

    ``speed``: None or inf for as fast as possible, else that many times real time.
    ``series``: what one-series files (``timestamp,value``) measure, and whose they are.
    Raises ``ReplayError`` for a file that cannot be read or (without ``skip_bad``)
    a bad row, naming the file and line.
    """
    if speed is not None and not (speed > 0):
        raise ReplayError(f"--speed {speed!r}: must be above 0 (e.g. 1 for real time, 60 for "
                          "a minute a second); leave it out to replay as fast as possible")
    reading = read_files(paths, skip_bad, cluster, rack, series)
    batches = frames(reading)
    summary = ReplaySummary(bad_rows=reading.bad_rows, bad_examples=reading.bad_examples,
                            notes=list(reading.notes))
    if not batches:
        summary.notes.append("no samples in the files")
        return summary
    _coverage(batches, detectors, summary)
    sink = JsonLinesSink(out)
    notifier = Notifier([sink], background=False)
    processor = Processor(store if store is not None else RecordingStore(), detectors,
                          notify=notifier.send, keep_firing_s=keep_firing_s)
    summary.start_ts, summary.end_ts = batches[0][0].ts, batches[-1][0].ts
    wall0 = clock()
    paced = speed is not None and math.isfinite(speed)
    for batch in batches:
        if paced:
            due = wall0 + (batch[0].ts - summary.start_ts) / speed  # type: ignore[operator]
            if due > clock():
                sleep(due - clock())
        processor.process(batch)
        summary.frames += len(batch)
    summary.transitions, summary.firing = sink.written, len(sink.fired)
    notifier.close()
    return summary
