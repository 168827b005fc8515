"""A store that keeps nothing but the alert changes written to it, in order.

For runs that only want the alerts a processor raises (``fleetwatch replay``
without ``--store``, ``fleetwatch evaluate``): the same ``Processor`` runs,
with no disk and no server behind it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from fleetwatch.frame import Frame
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


class RecordingStore:
    def __init__(self) -> None:
        self.changes: list[Alert] = []
        self.frames = 0
        self.recorded_events: list[Event] = []
        self._silences: list[Silence] = []
        self._acks: list[Acknowledgement] = []

    def write(self, frames: Sequence[Frame]) -> int:
        self.frames += len(frames)
        return sum(len(g.metrics) for f in frames for g in f.gpus)

    def write_alerts(self, alerts: Sequence[Alert]) -> None:
        self.changes.extend(alerts)

    def write_annotations(self, annotations: Sequence[Annotation]) -> None:
        pass

    def write_events(self, events: Sequence[Event]) -> None:
        self.recorded_events.extend(events)

    def events(self, start_ts: float, end_ts: float, node: str | None = None,
               kinds: Sequence[str] | None = None, device: str | None = None,
               except_xids: Collection[int] = ()) -> list[Event]:
        return [e for e in self.recorded_events if start_ts <= e.ts < end_ts
                and (node is None or e.node == node) and (kinds is None or e.kind in kinds)
                and (device is None or e.device == device)
                and not (e.kind == "xid" and e.code in except_xids)]

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        return []

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
