"""What a node's page shows, read from the store (``read_node``): its GPUs' series, its
alerts and annotations, and the limit lines drawn over them. Plain records, no Dash, no
plotly, as ``data``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from fleetwatch.dashboards.data import (
    BOARD_WINDOW_S,
    FALLBACK_SLOWDOWN_C,
    FUTURE_SLACK_S,
    POWER,
    RESOLVED_WINDOW_S,
    TEMP,
    UTIL,
    GpuSeries,
    read_alerts,
)
from fleetwatch.parts import thermal_limits_c
from fleetwatch.pipeline.board_events import Board
from fleetwatch.pipeline.store.base import Alert, Annotation, Point, Store, gpu_device, gpu_index

POWER_LIMIT = "gpu_power_limit_w"  # the limit the driver enforces (NVML), when agents send it
SLOWDOWN = "gpu_slowdown_temp_c"   # where the driver slows the clocks (NVML), when sent
NODE_METRICS: tuple[str, ...] = (TEMP, POWER, UTIL)
NODE_WINDOW_S = 3600.0


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


def node_series(points: Iterable[Point]) -> GpuSeries:
    out: GpuSeries = defaultdict(list)
    for key, ts, value in points:
        index = gpu_index(key.device)
        if index is not None:
            out[index].append((ts, value))
    for values in out.values():
        values.sort()
    return dict(sorted(out.items()))


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
