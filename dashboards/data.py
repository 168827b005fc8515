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
from typing import NamedTuple

from fleetwatch.alert_view import data_end, newest_sample_ms, ordered
from fleetwatch.config import DetectorsConfig
from fleetwatch.parts import thermal_limits_c
from fleetwatch.pipeline.board_events import Board
from fleetwatch.pipeline.inhibition import NODE_DOWN_RULES
from fleetwatch.pipeline.sinks.notified import settled
from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Acknowledgement,
    Alert,
    Annotation,
    Notification,
    Point,
    Silence,
    Store,
    gpu_device,
    gpu_index,
)

TEMP, POWER, UTIL = "gpu_temp_c", "gpu_power_w", "gpu_util_pct"
POWER_LIMIT = "gpu_power_limit_w"  # the limit the driver enforces (NVML), when agents send it
SLOWDOWN = "gpu_slowdown_temp_c"   # where the driver slows the clocks (NVML), when sent
NODE_METRICS: tuple[str, ...] = (TEMP, POWER, UTIL)
FALLBACK_SLOWDOWN_C = DetectorsConfig().fallback_slowdown_c
# How far back a node's boards (and so its GPUs' parts) are looked for (dashboards/boards.py)
BOARD_WINDOW_S = 90 * 86400
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


class LimitLine(NamedTuple):
    """A temperature limit line: its value and its label."""

    value: float
    text: str


def _gpus_text(devices: Iterable[str]) -> str:
    idx = sorted(i for i in (gpu_index(d) for d in devices) if i is not None)
    return ("GPU " if len(idx) == 1 else "GPUs ") + ", ".join(str(i) for i in idx)


def board_models(store: Store, node: str, now_s: float,
                 cluster: str | None) -> dict[str, str]:
    """Each GPU slot's part (device -> product name) as the node's newest ``gpu_identity``
    events name it; none from a store that keeps no events."""
    events = getattr(store, "events", None)
    if events is None:
        return {}
    out: dict[str, str] = {}
    for e in sorted(events(now_s - BOARD_WINDOW_S, now_s + 1, node=node,
                           kinds=["gpu_identity"]), key=lambda e: e.ts):
        if cluster in (None, e.cluster) and (model := Board.of_event(e).model):
            out[e.device] = model
    return out


def temp_limit_lines(own: dict[str, float], models: dict[str, str], devices: Iterable[str],
                     fallback_c: float) -> tuple[LimitLine, ...]:
    """The slowdown temperatures the thermal rules judge a node's GPUs by
    (models/thermal.py ``LimitTable``): NVML's where the GPU reports it (``own``, device ->
    °C), else its part's from ``fleetwatch.parts`` (``models``: device -> product name),
    else ``fallback_c`` (detectors.fallback_slowdown_c), which is said to be assumed. A
    line per value and source, naming its GPUs where there are several; none where every
    GPU reports its own (``limits[TEMP]`` draws that, as before)."""
    groups: dict[tuple[float, str], set[str]] = {}
    for d in set(devices) | set(own):
        if d in own:
            key = (own[d], "")
        elif (part := thermal_limits_c(models.get(d, ""))) is not None:
            key = (part[0], f"{models[d]}'s (parts table)")
        else:
            key = (fallback_c, "assumed (detectors.fallback_slowdown_c)")
        groups.setdefault(key, set()).add(d)
    if all(not how for _, how in groups):
        return ()
    return tuple(LimitLine(v, f"limit {v:g} °C" + (f" {how}" if how else "")
                           + (f" · {_gpus_text(ds)}" if len(groups) > 1 else ""))
                 for (v, how), ds in sorted(groups.items(), key=lambda kv: kv[0][0]))


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
    # Where the GPUs' temperature limits are not all NVML's own (and no site limit is set):
    # the slowdown temperatures the detectors judge them by, a line per value and source
    # (``temp_limit_lines``), in place of ``limits[TEMP]``.
    temp_lines: tuple[LimitLine, ...] = ()
    # The node's cluster: the one asked (``?cluster=``), or the only one the name is in.
    cluster: str | None = None
    # A name asked without a cluster that is in several: those clusters, and nothing else
    # read (their series drawn as one would be two machines as one line).
    ambiguous: tuple[str, ...] = ()
    # A name asked with a cluster that has no data of it: the clusters that do (an old
    # link, e.g. the agents' default cluster, or a typo), for the page to point to.
    elsewhere: tuple[str, ...] = ()


def clusters_of(node: str, points: Iterable[Point], alerts: Iterable[Alert]) -> tuple[str, ...]:
    """The clusters that have a node of this name, by its points and its alerts."""
    seen = {p[0].cluster for p in points if p[0].node == node}
    seen |= {a.cluster for a in alerts if a.node == node}
    return tuple(sorted(seen))


def node_label(cluster: str, node: str, many: bool) -> str:
    """How a node is named on screen: ``cluster/node`` where more than one cluster is
    shown, else its name alone."""
    return f"{cluster}/{node}" if many and cluster else node


def sort_alerts(alerts: Iterable[Alert]) -> tuple[Alert, ...]:
    """The order of ``fleetwatch alerts`` (``alert_view.ordered``): firing, pending, then
    resolved; critical first; the oldest first. Nothing in it changes while an alert
    stays in its state, so rows keep their place across refreshes."""
    return tuple(ordered(alerts))


def read_record(store: Store, alerts: Sequence[Alert]
                ) -> tuple[dict[str, Acknowledgement], dict[str, list[Notification]]]:
    """The acknowledgements and the notifications recorded (``Notification``) of these
    alerts, resolved ones' too, for ``alert_tables.record_notes``; none from a store that
    keeps neither."""
    if not alerts:
        return {}, {}
    ids = {a.id for a in alerts}
    acks = ({a.alert_id: a for a in store.acks() if a.alert_id in ids}
            if callable(getattr(store, "acks", None)) else {})
    read = getattr(store, "notifications", None)
    notified: dict[str, list[Notification]] = {}
    if callable(read):
        start = min(a.started_ts for a in alerts)
        for n in settled(read(start, 1e18, alert_ids=sorted(ids))):
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


def node_series(points: Iterable[Point]) -> GpuSeries:
    out: GpuSeries = defaultdict(list)
    for key, ts, value in points:
        index = gpu_index(key.device)
        if index is not None:
            out[index].append((ts, value))
    for values in out.values():
        values.sort()
    return dict(sorted(out.items()))


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


def read_node(store: Store, node: str, now_s: float, window_s: float = NODE_WINDOW_S,
              temp_limit_c: float | None = None, cluster: str | None = None,
              fallback_slowdown_c: float = FALLBACK_SLOWDOWN_C) -> NodeView:
    """The node's last ``window_s``; ``temp_limit_c`` (the site's limit, 0 or None for
    none: then the lowest slowdown temperature its GPUs report) and the newest power limit
    its GPUs report become limit lines. Its alerts: active, and
    resolved in the last day or ``window_s`` if longer.

    ``cluster``: the node of that cluster. Without one, the node of the one cluster that
    has a node of this name; a name in several gives a view with ``ambiguous`` set to
    them and nothing else, not their machines drawn as one."""
    start_s, end_s = now_s - window_s, now_s + FUTURE_SLACK_S
    start_ms, end_ms = int(start_s * 1000), int(end_s * 1000)
    active, resolved = read_alerts(store, now_s, max(window_s, RESOLVED_WINDOW_S), cluster)
    alerts = tuple(a for a in active + resolved if a.node == node)
    first = store.range(NODE_METRICS[0], start_ms, end_ms, node=node, cluster=cluster)
    if cluster is None:
        clusters = clusters_of(node, first, alerts)
        if len(clusters) > 1:
            return NodeView(node, None, start_ms, int(now_s * 1000), {}, (), (),
                            ambiguous=clusters)
        cluster = clusters[0] if clusters else None
    # Its rack as its samples name it, else as its alerts do (a silent node has no sample
    # in the range, but its node_silent alert knows where it is).
    rack = next((a.rack for a in alerts if a.rack), None)
    newest_ms = int(now_s * 1000)
    series: dict[str, GpuSeries] = {}
    for metric in NODE_METRICS:
        points = first if metric == NODE_METRICS[0] else store.range(
            metric, start_ms, end_ms, node=node, cluster=cluster)
        if points:
            rack = points[-1][0].rack
            newest_ms = max(newest_ms, points[-1][1])
        series[metric] = node_series(points)
    # Those of the node's cluster, and those that name none (written before annotations
    # had a cluster: stores of one cluster).
    annotations = tuple(a for a in store.annotations(start_s, end_s)
                        if a.node == node and (not a.cluster or cluster in (None, a.cluster)))
    limits = {TEMP: temp_limit_c} if temp_limit_c else {}
    temp_lines: tuple[LimitLine, ...] = ()
    if not temp_limit_c:  # no site limit: the slowdown temperatures the detectors judge by
        slowdowns = store.range(SLOWDOWN, start_ms, end_ms, node=node, cluster=cluster)
        newest_slow = {key.device: value for key, _, value in slowdowns}
        devices = {gpu_device(i) for i in series.get(TEMP, {})}
        models = board_models(store, node, now_s, cluster) if devices - set(newest_slow) \
            else {}
        temp_lines = temp_limit_lines(newest_slow, models, devices, fallback_slowdown_c)
        if newest_slow and not temp_lines:  # every GPU's own: the lowest of them
            limits[TEMP] = min(newest_slow.values())
    power_limits = store.range(POWER_LIMIT, start_ms, end_ms, node=node, cluster=cluster)
    if power_limits:  # the highest GPU's newest: one line, the cap the node's GPUs run under
        newest = {key.device: value for key, _, value in power_limits}
        limits[POWER] = max(newest.values())
    elsewhere: tuple[str, ...] = ()
    if cluster is not None and not any(series.values()) and not alerts:
        # Read only when the page would be empty: the name's series in any cluster.
        anywhere = store.range(NODE_METRICS[0], start_ms, end_ms, node=node)
        elsewhere = tuple(c for c in clusters_of(node, anywhere, ()) if c != cluster)
    return NodeView(node, rack, start_ms, newest_ms, series, annotations, alerts, limits,
                    temp_lines, cluster, elsewhere=elsewhere)
