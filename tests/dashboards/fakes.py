"""Records and a read-only in-memory store for the dashboard's pure tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Alert,
    AlertState,
    Annotation,
    Point,
    SeriesKey,
    StoreError,
)

NOW = 1_800_000_000.0  # a fixed "now" (epoch s) so that ages and windows are exact


def key(metric: str, node: str, gpu: int | None, rack: str = "rack-00") -> SeriesKey:
    return SeriesKey(metric, "sim", rack, node, "host" if gpu is None else f"gpu{gpu}")


def point(metric: str, node: str, gpu: int | None, value: float, age_s: float = 10.0,
          rack: str = "rack-00") -> Point:
    return key(metric, node, gpu, rack), int((NOW - age_s) * 1000), value


def alert(node: str, gpu: int | None, state: AlertState = "firing", value: float = 90.0,
          started_ago_s: float = 600.0, rack: str = "rack-00", severity: str = "critical",
          rule: str = "gpu_temp_high") -> Alert:
    device = "host" if gpu is None else f"gpu{gpu}"
    started = NOW - started_ago_s
    return Alert(
        id=f"{rule}/{node}/{device}/{int(started * 1000)}", rule=rule, severity=severity,
        cluster="sim", rack=rack, node=node, device=device, state=state, started_ts=started,
        updated_ts=NOW - 5, value=value, message=f"GPU {gpu} on {node} at {value:.0f} °C",
        fired_ts=started + 60 if state != "pending" else None,
        resolved_ts=NOW - 5 if state == "resolved" else None)


@dataclass
class FakeStore:
    """The read half of ``Store`` over lists; ``broken`` makes every read fail."""

    points: list[Point] = field(default_factory=list)
    alert_rows: list[Alert] = field(default_factory=list)
    annotation_rows: list[Annotation] = field(default_factory=list)
    broken: bool = False

    def _check(self) -> None:
        if self.broken:
            raise StoreError("fake store is down")

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        self._check()
        newest: dict[SeriesKey, Point] = {}
        for p in sorted(self.points, key=lambda p: p[1]):
            if p[0].metric == metric and p[1] >= since_ms:
                newest[p[0]] = p
        return list(newest.values())

    def newest_ms(self, metric: str, since_ms: int, until_ms: int,
                  cluster: str | None = None) -> int | None:
        self._check()
        return max((p[1] for p in self.points if p[0].metric == metric
                    and since_ms <= p[1] <= until_ms and cluster in (None, p[0].cluster)),
                   default=None)

    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None, cluster: str | None = None) -> list[Point]:
        self._check()
        return sorted((p for p in self.points if p[0].metric == metric
                       and start_ms <= p[1] < end_ms and node in (None, p[0].node)
                       and device in (None, p[0].device)
                       and cluster in (None, p[0].cluster)), key=lambda p: p[1])

    def alerts(self, states: Sequence[AlertState] = ACTIVE_STATES,
               since_ts: float | None = None) -> list[Alert]:
        self._check()
        return [a for a in self.alert_rows
                if a.state in states and (since_ts is None or a.updated_ts >= since_ts)]

    def annotations(self, start_ts: float, end_ts: float) -> list[Annotation]:
        self._check()
        return [a for a in self.annotation_rows
                if a.start_ts < end_ts and (a.end_ts is None or a.end_ts >= start_ts)]
