"""A batch in the processor's hands, its counters, and how a refused batch is split.

``bisect`` is what the processor does when the store refuses a batch for
good (``StoreRejected``) or a batch keeps failing with an unexpected error
``MAX_SURPRISES`` times in a row: find the frames the store will not take,
and store the rest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.pipeline.bus import Message, Partition
from fleetwatch.pipeline.store.base import Event, StoreError, StoreRejected

# Failures in a row of one batch's write with an unexpected error before the
# batch is bisected and the frames the store cannot take are dead-lettered.
MAX_SURPRISES = 3


@dataclass
class Stats:
    frames: int = 0
    points: int = 0
    dead_letters: int = 0
    dead_letters_lost: int = 0
    alerts_changed: int = 0  # transitions: opened, fired, resolved
    alerts_written: int = 0  # transitions and refreshes of an open alert's value
    store_errors: int = 0
    store_rejected: int = 0
    # Events, alert changes, energy ledger rows the store refused for good, by kind.
    records_refused: dict[str, int] = field(default_factory=dict)
    errors: int = 0  # unexpected errors (bugs): logged with their traceback
    paused: bool = False
    last_batch_s: float = 0.0
    by_reason: dict[str, int] = field(default_factory=dict)
    # Readings left out of frames otherwise stored (non-finite, or outside their metric's
    # possible range), by metric.
    readings_dropped: dict[str, int] = field(default_factory=dict)
    # Metrics left out because this processor's catalogue lacks their id (an agent of a
    # later release), by "scope:id" (at most UNKNOWN_KEYS of them, the rest "other").
    unknown_metrics: dict[str, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)  # events stored, by kind
    # Frames stamped ahead of the processor's clock (pipeline.clock_skew.AHEAD_WARN_S),
    # dead-lettered or not; nodes found steadily far behind the others, once a batch.
    clock_ahead: int = 0
    clock_behind: int = 0
    # Since when (epoch seconds) the store has failed every write, and its latest reason;
    # None while it takes them (``fleetwatch up`` shows it on the page).
    store_failing: tuple[float, str] | None = None
    # Seconds from the newest frame of the last live batch with alert changes to their
    # sending: a batch that waited (for the store, a backlog) shows here, not in startsAt.
    alert_delay_s: float = 0.0


def bisect(write: Callable[[list[Frame]], int], frames: list[Frame],
           sources: Sequence[Message] | None, exc: BaseException,
           refused: Callable[[Frame, Message | None, str, bool], None], surprise: bool) -> int:
    """Write what the store takes of ``frames``; ``refused`` each frame it will not take.

    A ``StoreRejected`` naming frames refuses those and writes the others; one
    naming none (or any error, when ``surprise``: the batch has failed too
    often with an unexpected error) splits the batch in halves, down to
    single frames. ``StoreError`` (the store is away) is raised as it is.
    ``refused`` is told whether the frame itself is at fault (``about_frames``;
    an unexpected error counts as such), or only the store's own reason.
    Returns the points written.
    """
    points = 0
    todo: list[tuple[list[Frame], list[Message] | None, BaseException]] = [
        (frames, None if sources is None else list(sources), exc)]
    while todo:
        fs, ms, err = todo.pop()
        reason = (f"store rejected: {err.reason}" if isinstance(err, StoreRejected)
                  else f"store write failed {MAX_SURPRISES} times: {type(err).__name__}: {err}")
        indices = err.indices if isinstance(err, StoreRejected) else None
        at_fault = err.about_frames if isinstance(err, StoreRejected) else True
        if indices and all(0 <= i < len(fs) for i in indices):
            bad = set(indices)
            parts = [[i for i in range(len(fs)) if i not in bad]]
        elif len(fs) > 1:
            bad, half = set(), len(fs) // 2
            parts = [list(range(half)), list(range(half, len(fs)))]
        else:
            bad, parts = {0}, []
        for i in sorted(bad):
            refused(fs[i], None if ms is None else ms[i], reason, at_fault)
        for part in parts:
            if not part:
                continue
            sub = [fs[i] for i in part]
            sub_ms = None if ms is None else [ms[i] for i in part]
            try:
                points += write(sub)
            except StoreRejected as e:
                todo.append((sub, sub_ms, e))
            except StoreError:
                raise
            except Exception as e:  # noqa: BLE001 - judged like a refusal, see above
                if not surprise:
                    raise
                todo.append((sub, sub_ms, e))
    return points


def settle(held: deque[Batch]) -> None:
    """Let writes in flight finish; their batches are written again (writes are idempotent)."""
    for batch in held:
        if batch.write is not None:
            batch.write.exception()
            batch.write = None


class Batch:
    """Messages polled together, their good frames once decoded, their write once submitted."""

    __slots__ = ("messages", "frames", "sources", "write", "started", "points", "findings",
                 "events", "owned", "failures", "generation", "behind", "judged")

    def __init__(self, messages: list[Message], frames: list[Frame] | None = None,
                 sources: Sequence[Message] | None = None, generation: int = 0,
                 behind: frozenset[Partition] = frozenset()) -> None:
        self.messages = messages
        self.frames = frames
        self.sources = sources            # the message of each frame
        self.write: Future[int] | None = None
        self.started = 0.0
        self.points: int | None = None    # set once stored
        self.findings: list[Finding] | None = None  # set once detected (kept for a retry)
        self.events: list[Event] = []     # derived with the findings, written with them
        self.owned: list[Frame] = []      # the frames evaluated (of partitions still owned)
        self.failures = 0                 # unexpected errors of this batch, in a row
        self.generation = generation      # the ownership generation when polled
        # The partitions that still held messages not polled yet when it was polled.
        self.behind = behind
        # Its alert changes applied and sent (at most once a batch, even when the store
        # was away and its write is retried: ``Processor.judge``).
        self.judged = False
