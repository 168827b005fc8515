"""What the pages show, read from the store: plain records, no Dash, no plotly.

Every read goes through the ``Store`` protocol, one call per metric, so the
dashboard works against any backend and against a SQLite file that another
process is writing. Turning points into records is kept in pure functions
(``fleet_cells``; ``node_data.node_series``) so that they are tested without a store.
A node's page reads its own (``node_data``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fleetwatch.alert_view import NOTIFIED_AHEAD_S, data_end, newest_sample_ms, ordered
from fleetwatch.config import DetectorsConfig
from fleetwatch.pipeline.inhibition import NODE_DOWN_RULES
from fleetwatch.pipeline.sinks.notified import settled
from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Acknowledgement,
    Alert,
    Notification,
    Point,
    Silence,
    Store,
    gpu_index,
)

TEMP, POWER, UTIL = "gpu_temp_c", "gpu_power_w", "gpu_util_pct"
FALLBACK_SLOWDOWN_C = DetectorsConfig().fallback_slowdown_c
# How far back a node's boards (and so its GPUs' parts) are looked for (dashboards/boards.py)
BOARD_WINDOW_S = 90 * 86400
# A GPU whose newest sample is older than this is not "reporting": it drops
# off the heatmap rather than showing a stale temperature as if it were live.
STALE_S = 300.0
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
    # Node names repeat across clusters (node001 in each): a GPU is (cluster, node, gpu).
    cluster: str = ""

    @property
    def place(self) -> tuple[str, str]:
        """(cluster, node): the machine, whatever its name is elsewhere."""
        return self.cluster, self.node


@dataclass(frozen=True, slots=True)
class FleetView:
    cells: tuple[GpuCell, ...]
    alerts: tuple[Alert, ...]  # active ones, firing first
    # When no GPU is fresh: the newest temperature sample ever stored (None: never
    # any), so that the page can tell "no data yet" from "no data since 10:21".
    last_ms: int | None = None
    # Every cluster seen (reporting GPUs or open alerts), whatever the page's filter: what
    # its cluster picker offers, and whether names need their cluster to be told apart.
    clusters: tuple[str, ...] = ()
    cluster: str | None = None  # the one cluster shown (``?cluster=``), None: all
    # Nodes fleetwatch has declared silent (their node_silent or node_down alert fires):
    # (cluster, node) -> since when. Their cells are their last readings, not live ones.
    silent: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def reporting(self) -> tuple[GpuCell, ...]:
        """The cells of nodes not declared silent: the GPUs reporting. One notion of "not
        reporting" with the pager's: the node_silent rule's verdict, per node at its own
        threshold (``detectors.silent_intervals`` of its interval, ``silent_min_s``)."""
        return tuple(c for c in self.cells if c.place not in self.silent)

    @property
    def many_clusters(self) -> bool:
        """Whether more than one cluster is shown: then a node is named with its cluster."""
        return self.cluster is None and len(self.clusters) > 1

    @property
    def nodes(self) -> int:
        """The nodes reporting."""
        return len({c.place for c in self.reporting})

    @property
    def hottest(self) -> GpuCell | None:
        return max(self.reporting, key=lambda c: c.temp_c, default=None)

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


def node_label(cluster: str, node: str, many: bool) -> str:
    """How a node is named on screen: ``cluster/node`` where more than one cluster is
    shown, else its name alone."""
    return f"{cluster}/{node}" if many and cluster else node


def sort_alerts(alerts: Iterable[Alert]) -> tuple[Alert, ...]:
    """The order of ``fleetwatch alerts`` (``alert_view.ordered``): firing, pending, then
    resolved; critical first; the oldest first. Nothing in it changes while an alert
    stays in its state, so rows keep their place across refreshes."""
    return tuple(ordered(alerts))


def read_record(store: Store, alerts: Sequence[Alert], now_s: float
                ) -> tuple[dict[str, Acknowledgement], dict[str, list[Notification]]]:
    """The acknowledgements and the notifications recorded (``Notification``) of these
    alerts, resolved ones' too, up to ``now_s`` (and ``NOTIFIED_AHEAD_S`` past it), for
    ``alert_tables.record_notes``; none from a store that keeps neither."""
    if not alerts:
        return {}, {}
    ids = {a.id for a in alerts}
    acks = ({a.alert_id: a for a in store.acks() if a.alert_id in ids}
            if callable(getattr(store, "acks", None)) else {})
    read = getattr(store, "notifications", None)
    notified: dict[str, list[Notification]] = {}
    if callable(read):
        start = min(a.started_ts for a in alerts)
        for n in settled(read(start, now_s + NOTIFIED_AHEAD_S, alert_ids=sorted(ids))):
            notified.setdefault(n.alert_id, []).append(n)
    return acks, notified


def read_mutes(store: Store, alerts: Sequence[Alert], now_s: float
               ) -> tuple[Sequence[Silence], dict[str, Acknowledgement]]:
    """The silences in force and the acknowledgements, for ``alert_tables.notes``; none from
    a store that keeps neither."""
    if not any(a.state != "resolved" for a in alerts):
        return [], {}
    silences = store.silences(now_s) if callable(getattr(store, "silences", None)) else []
    acks = ({a.alert_id: a for a in store.acks()} if callable(getattr(store, "acks", None))
            else {})
    return silences, acks


GpuKey = tuple[str, str, int]  # (cluster, node, gpu index)


def _gpu_points(points: Iterable[Point]) -> dict[GpuKey, Point]:
    out: dict[GpuKey, Point] = {}
    for p in points:
        index = gpu_index(p[0].device)
        if index is not None:
            out[(p[0].cluster, p[0].node, index)] = p
    return out


def fleet_cells(temp: Sequence[Point], power: Sequence[Point] = (),
                util: Sequence[Point] = ()) -> tuple[GpuCell, ...]:
    """One cell per GPU that reports a temperature, ordered by cluster, rack, node, GPU.
    Same-named nodes of two clusters are two machines: each keeps its own cells.

    Power and utilization are optional extras: a GPU that does not report
    them keeps its cell with the value unknown (None), never 0.
    """
    by_power, by_util = _gpu_points(power), _gpu_points(util)
    cells = []
    for gpu, (key, ts, value) in _gpu_points(temp).items():
        p, u = by_power.get(gpu), by_util.get(gpu)
        cells.append(GpuCell(key.rack, key.node, gpu[2], value, ts,
                             p[2] if p else None, u[2] if u else None, cluster=key.cluster))
    return tuple(sorted(cells, key=lambda c: (c.cluster, c.rack, c.node, c.gpu)))


def in_cluster(cluster: str | None, of: str) -> bool:
    return cluster is None or of == cluster


def fleet_view(cells: Sequence[GpuCell], alerts: Sequence[Alert], cluster: str | None = None,
               last_ms: int | None = None) -> FleetView:
    """The fleet of ``cluster`` (None: every cluster) from every cell and active alert."""
    clusters = tuple(sorted({c.cluster for c in cells} | {a.cluster for a in alerts}))
    shown = sort_alerts(a for a in alerts if in_cluster(cluster, a.cluster))
    return FleetView(tuple(c for c in cells if in_cluster(cluster, c.cluster)), shown,
                     last_ms, clusters, cluster, silent_nodes(shown))


def silent_nodes(alerts: Iterable[Alert]) -> dict[tuple[str, str], float]:
    """(cluster, node) -> since when, of the nodes whose node_silent or node_down alert
    fires: what the pager said of them is what the page says (a pending one is no verdict)."""
    out: dict[tuple[str, str], float] = {}
    for a in alerts:
        if a.rule in NODE_DOWN_RULES and a.state == "firing" and a.node:
            since = a.fired_ts if a.fired_ts is not None else a.started_ts
            out[(a.cluster, a.node)] = min(since, out.get((a.cluster, a.node), since))
    return out


def read_fleet(store: Store, now_s: float, cluster: str | None = None) -> FleetView:
    since = int((now_s - STALE_S) * 1000)
    cells = fleet_cells(store.latest(TEMP, since), store.latest(POWER, since),
                        store.latest(UTIL, since))
    last_ms = None
    if not any(in_cluster(cluster, c.cluster) for c in cells):
        # how old is the newest sample at all? (none in the window: none stamped ahead)
        last_ms = newest_sample_ms(store, now_s, cluster=cluster)
    return fleet_view(cells, store.alerts(ACTIVE_STATES), cluster, last_ms)


def read_alerts(store: Store, now_s: float, window_s: float = RESOLVED_WINDOW_S,
                cluster: str | None = None) -> tuple[tuple[Alert, ...], tuple[Alert, ...]]:
    """(active, resolved in the last ``window_s``), each sorted for display; of one
    cluster where given."""
    resolved = store.alerts(("resolved",), since_ts=now_s - window_s)
    active = store.alerts(ACTIVE_STATES)
    return (sort_alerts(a for a in active if in_cluster(cluster, a.cluster)),
            sort_alerts(a for a in resolved if in_cluster(cluster, a.cluster)))


def read_data_end(store: Store, alerts: Sequence[Alert], now_s: float,
                  cluster: str | None = None) -> float | None:
    """When the data (of ``cluster`` where given) ended, if they did and an alert shown is
    open (``data_end``)."""
    return (data_end(store, now_s, cluster) if any(a.state != "resolved" for a in alerts)
            else None)
