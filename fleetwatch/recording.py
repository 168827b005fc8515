"""A store that keeps nothing but the alert changes written to it, in order.

For runs that only want the alerts a processor raises (``fleetwatch replay``
without ``--store``, ``fleetwatch evaluate``): the same ``Processor`` runs,
with no disk and no server behind it.

Of the events it keeps only what a processor reads back (``board_recall``): each GPU
slot's newest board and state and its jobs still open, so that a recording of a
churning fleet (two job events a job, 25,000 jobs an hour) is held in the fleet's
size. ``history=False`` (a replay, whose transitions the sink prints as they come)
keeps no alert change either, only each open alert's newest version.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from fleetwatch.frame import Frame
from fleetwatch.pipeline.events import split_jobs
from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Acknowledgement,
    Alert,
    AlertState,
    Annotation,
    Event,
    Point,
    Silence,
)

# A node: (cluster, node).
NodeKey = tuple[str, str]


class RecordingStore:
    def __init__(self, history: bool = True) -> None:
        """``history``: keep every alert change in ``changes`` (what ``evaluate`` scores);
        without, only the open alerts' newest versions, in ``open``."""
        self.history = history
        self.changes: list[Alert] = []
        self.open: dict[tuple[str, str], Alert] = {}  # (cluster, id) -> newest, while open
        self.frames = 0
        # node -> device -> its newest gpu_identity, its newest gpu_state naming a state,
        # and its job events since none was open
        self._boards: dict[NodeKey, dict[str, Event]] = {}
        self._states: dict[NodeKey, dict[str, Event]] = {}
        self._jobs: dict[NodeKey, dict[str, list[Event]]] = {}
        self._silences: list[Silence] = []
        self._acks: list[Acknowledgement] = []

    @property
    def recorded_events(self) -> list[Event]:
        """The events kept, oldest first."""
        return self._kept(None)

    def _kept(self, node: str | None) -> list[Event]:
        kept: list[Event] = []
        for held in (self._boards, self._states):
            kept += [e for key, slots in held.items() if node is None or key[1] == node
                     for e in slots.values()]
        kept += [e for key, slots in self._jobs.items() if node is None or key[1] == node
                 for events in slots.values() for e in events]
        return sorted(kept, key=_recall_order)

    def write(self, frames: Sequence[Frame]) -> int:
        self.frames += len(frames)
        return sum(len(g.metrics) for f in frames for g in f.gpus)

    def write_alerts(self, alerts: Sequence[Alert]) -> None:
        if self.history:
            self.changes.extend(alerts)
        for a in alerts:
            if a.state in ACTIVE_STATES:
                self.open[(a.cluster, a.id)] = a
            else:
                self.open.pop((a.cluster, a.id), None)

    def write_annotations(self, annotations: Sequence[Annotation]) -> None:
        pass

    def write_events(self, events: Sequence[Event]) -> None:
        """Kept as ``EventTracker.recall`` reads them (events come in time order): a slot's
        board replaces its last, and a board moved from another slot of the node leaves
        it; a slot's job events go once none of its jobs is open (a start with nothing
        open after it changes nothing); other kinds are not read back."""
        for e in events:
            key = (e.cluster, e.node)
            if e.kind == "gpu_identity":
                boards = self._boards.setdefault(key, {})
                for other in [d for d, b in boards.items() if d != e.device
                              and b.value == e.value]:
                    del boards[other]
                boards[e.device] = e
            elif e.kind == "gpu_state" and e.value:
                self._states.setdefault(key, {})[e.device] = e
            elif e.kind in ("job_start", "job_end"):
                slots = self._jobs.setdefault(key, {})
                held = slots.setdefault(e.device, [])
                held.append(e)
                if e.kind == "job_end" and not _still_open(held):
                    del slots[e.device]

    def events(self, start_ts: float, end_ts: float, node: str | None = None,
               kinds: Sequence[str] | None = None, device: str | None = None,
               except_xids: Collection[int] = ()) -> list[Event]:
        return [e for e in self._kept(node) if start_ts <= e.ts < end_ts
                and (node is None or e.node == node) and (kinds is None or e.kind in kinds)
                and (device is None or e.device == device)
                and not (e.kind == "xid" and e.code in except_xids)]

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        return []

    def newest_ms(self, metric: str, since_ms: int, until_ms: int,
                  cluster: str | None = None) -> int | None:
        return None

    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None, cluster: str | None = None) -> list[Point]:
        return []

    def alerts(self, states: Sequence[AlertState] = ACTIVE_STATES,
               since_ts: float | None = None) -> list[Alert]:
        return []  # a fresh run: nothing open to reload

    def annotations(self, start_ts: float, end_ts: float) -> list[Annotation]:
        return []

    def write_silences(self, silences: Sequence[Silence]) -> None:
        self._silences.extend(silences)

    def silences(self, active_at: float | None = None) -> list[Silence]:
        return [s for s in self._silences
                if active_at is None or s.start_ts <= active_at < s.end_ts]

    def write_acks(self, acks: Sequence[Acknowledgement]) -> None:
        self._acks.extend(acks)

    def acks(self) -> list[Acknowledgement]:
        return list(self._acks)

    def maintain(self, now_ms: int) -> None:
        pass

    def close(self) -> None:
        pass


def _recall_order(e: Event) -> tuple[float, bool]:
    """The order ``EventTracker.recall`` reads events in: by time, ends before starts."""
    return (e.ts, e.kind == "job_start")


def _still_open(held: Sequence[Event]) -> bool:
    """Whether a slot's job events leave a job open, as ``recall`` reads them."""
    jobs: set[str] = set()
    for e in sorted(held, key=_recall_order):
        if e.kind == "job_start":
            jobs.update(split_jobs(e.value))
        else:
            jobs.difference_update(split_jobs(e.value))
    return bool(jobs)
