"""What the pages show, read from the store: plain records, no Dash, no plotly.

Every read goes through the ``Store`` protocol, one call per metric, so the
dashboard works against any backend and against a SQLite file that another
process is writing. Turning points into records is kept in pure functions
(``fleet_cells``, ``node_series``) so that they are tested without a store.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fleetwatch.alert_view import data_end, ordered
from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Acknowledgement,
    Alert,
    Annotation,
    Point,
    Silence,
    Store,
    gpu_index,
)

TEMP, POWER, UTIL = "gpu_temp_c", "gpu_power_w", "gpu_util_pct"
POWER_LIMIT = "gpu_power_limit_w"  # the limit the driver enforces (NVML), when agents send it
SLOWDOWN = "gpu_slowdown_temp_c"   # where the driver slows the clocks (NVML), when sent
NODE_METRICS: tuple[str, ...] = (TEMP, POWER, UTIL)
# A GPU whose newest sample is older than this is not "reporting": it drops
# off the heatmap rather than showing a stale temperature as if it were live.
STALE_S = 300.0
NODE_WINDOW_S = 3600.0
RESOLVED_WINDOW_S = 24 * 3600.0
# Readers take a little slack past "now": a simulator or a clock a few
# seconds ahead of ours still shows its newest points.
FUTURE_SLACK_S = 120.0
# A sample stamped this far past our "now" comes from a node whose clock runs ahead.
AHEAD_S = 10.0


@dataclass(frozen=True, slots=True)
class GpuCell:
    """One GPU's newest readings: a cell of the fleet heatmap."""

    rack: str
    node: str
    gpu: int
    temp_c: float
    ts_ms: int
    power_w: float | None = None
    util_pct: float | None = None
    job: str | None = None


@dataclass(frozen=True, slots=True)
class FleetView:
    cells: tuple[GpuCell, ...]
    alerts: tuple[Alert, ...]  # active ones, firing first
    # When no GPU is fresh: the newest temperature sample ever stored (None: never
    # any), so that the page can tell "no data yet" from "no data since 10:21".
    last_ms: int | None = None

    @property
    def hottest(self) -> GpuCell | None:
        return max(self.cells, key=lambda c: c.temp_c, default=None)

    @property
    def newest_ms(self) -> int | None:
        return max((c.ts_ms for c in self.cells), default=None)

    def as_of(self, now_s: float) -> tuple[int | None, int]:
        """When the data are as of: the newest sample of the GPUs not stamped more than
        ``AHEAD_S`` after ``now_s``, never later than it (one sample stamped 2099 by a
        wrong clock, stored before the processor bounded frames to its own clock, must
        not make the fleet look live); and how many GPUs are stamped further ahead."""
        now_ms = int(now_s * 1000)
        limit = now_ms + AHEAD_S * 1000
        ahead = sum(1 for c in self.cells if c.ts_ms > limit)
        # The GPUs in time say how fresh the data are; only when every one is ahead is
        # "now" all that can be said.
        newest = max((c.ts_ms for c in self.cells if c.ts_ms <= limit),
                     default=self.newest_ms if self.cells else self.last_ms)
        return (None if newest is None else min(newest, now_ms)), ahead

    def count(self, state: str) -> int:
        return sum(1 for a in self.alerts if a.state == state)


# gpu index -> [(ts_ms, value)] in time order
GpuSeries = dict[int, list[tuple[int, float]]]


@dataclass(frozen=True, slots=True)
class NodeView:
    node: str
    rack: str | None
    start_ms: int
    end_ms: int  # now, or the newest point if that is later
    series: dict[str, GpuSeries]  # metric -> per-GPU series
    annotations: tuple[Annotation, ...]
    alerts: tuple[Alert, ...]  # active, then resolved, each in ``sort_alerts``' order
    limits: dict[str, float] = field(default_factory=dict)  # metric -> its limit line


def sort_alerts(alerts: Iterable[Alert]) -> tuple[Alert, ...]:
    """The order of ``fleetwatch alerts`` (``alert_view.ordered``): firing, pending, then
    resolved; critical first; the oldest first. Nothing in it changes while an alert
    stays in its state, so rows keep their place across refreshes."""
    return tuple(ordered(alerts))


def read_mutes(store: Store, alerts: Sequence[Alert], now_s: float
               ) -> tuple[Sequence[Silence], dict[str, Acknowledgement]]:
    """The silences in force and the acknowledgements, for ``components.notes``; none from
    a store that keeps neither."""
    if not any(a.state != "resolved" for a in alerts):
        return [], {}
    silences = store.silences(now_s) if callable(getattr(store, "silences", None)) else []
    acks = ({a.alert_id: a for a in store.acks()} if callable(getattr(store, "acks", None))
            else {})
    return silences, acks


def _gpu_points(points: Iterable[Point]) -> dict[tuple[str, int], Point]:
    out: dict[tuple[str, int], Point] = {}
    for p in points:
        index = gpu_index(p[0].device)
        if index is not None:
            out[(p[0].node, index)] = p
    return out


def fleet_cells(temp: Sequence[Point], power: Sequence[Point] = (),
                util: Sequence[Point] = ()) -> tuple[GpuCell, ...]:
    """One cell per GPU that reports a temperature, ordered by rack, node, GPU.

    Power and utilization are optional extras: a GPU that does not report
    them keeps its cell with the value unknown (None), never 0.
    """
    by_power, by_util = _gpu_points(power), _gpu_points(util)
    cells = []
    for (node, index), (key, ts, value) in _gpu_points(temp).items():
        p, u = by_power.get((node, index)), by_util.get((node, index))
        cells.append(GpuCell(key.rack, node, index, value, ts,
                             p[2] if p else None, u[2] if u else None))
    return tuple(sorted(cells, key=lambda c: (c.rack, c.node, c.gpu)))


def node_series(points: Iterable[Point]) -> GpuSeries:
    out: GpuSeries = defaultdict(list)
    for key, ts, value in points:
        index = gpu_index(key.device)
        if index is not None:
            out[index].append((ts, value))
    for values in out.values():
        values.sort()
    return dict(sorted(out.items()))


def read_fleet(store: Store, now_s: float) -> FleetView:
    since = int((now_s - STALE_S) * 1000)
    cells = fleet_cells(store.latest(TEMP, since), store.latest(POWER, since),
                        store.latest(UTIL, since))
    last_ms = None
    if not cells:  # the rare, cheap-enough case: how old is the newest sample at all?
        last_ms = max((ts for _, ts, _ in store.latest(TEMP, 0)), default=None)
    return FleetView(cells, sort_alerts(store.alerts(ACTIVE_STATES)), last_ms)


def read_alerts(store: Store, now_s: float, window_s: float = RESOLVED_WINDOW_S
                ) -> tuple[tuple[Alert, ...], tuple[Alert, ...]]:
    """(active, resolved in the last ``window_s``), each sorted for display."""
    resolved = store.alerts(("resolved",), since_ts=now_s - window_s)
    return sort_alerts(store.alerts(ACTIVE_STATES)), sort_alerts(resolved)


def read_data_end(store: Store, alerts: Sequence[Alert], now_s: float) -> float | None:
    """When the data ended, if they did and an alert shown is open (``data_end``)."""
    return data_end(store, now_s) if any(a.state != "resolved" for a in alerts) else None


def read_node(store: Store, node: str, now_s: float, window_s: float = NODE_WINDOW_S,
              temp_limit_c: float | None = None) -> NodeView:
    """The node's last ``window_s``; ``temp_limit_c`` (the site's limit, 0 or None for
    none: then the lowest slowdown temperature its GPUs report) and the newest power limit
    its GPUs report become limit lines. Its alerts: active, and
    resolved in the last day or ``window_s`` if longer."""
    start_s, end_s = now_s - window_s, now_s + FUTURE_SLACK_S
    start_ms, end_ms = int(start_s * 1000), int(end_s * 1000)
    rack = None
    newest_ms = int(now_s * 1000)
    series: dict[str, GpuSeries] = {}
    for metric in NODE_METRICS:
        points = store.range(metric, start_ms, end_ms, node=node)
        if points:
            rack = points[-1][0].rack
            newest_ms = max(newest_ms, points[-1][1])
        series[metric] = node_series(points)
    annotations = tuple(a for a in store.annotations(start_s, end_s) if a.node == node)
    active, resolved = read_alerts(store, now_s, max(window_s, RESOLVED_WINDOW_S))
    alerts = tuple(a for a in active + resolved if a.node == node)
    limits = {TEMP: temp_limit_c} if temp_limit_c else {}
    if not temp_limit_c:  # no site limit: the lowest slowdown temperature its GPUs report
        slowdowns = store.range(SLOWDOWN, start_ms, end_ms, node=node)
        if slowdowns:
            newest_slow = {key.device: value for key, _, value in slowdowns}
            limits[TEMP] = min(newest_slow.values())
    power_limits = store.range(POWER_LIMIT, start_ms, end_ms, node=node)
    if power_limits:  # the highest GPU's newest: one line, the cap the node's GPUs run under
        newest = {key.device: value for key, _, value in power_limits}
        limits[POWER] = max(newest.values())
    return NodeView(node, rack, start_ms, newest_ms, series, annotations, alerts, limits)
