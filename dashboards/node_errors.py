"""The node page's error view: what happened to its GPUs (XIDs with their meaning, a GPU
lost, the node silent) from the store's events, and the error counters (ECC, retired pages,
row remapping, PCIe replays, NVLink) of the GPU the page brings forward.

``read_errors`` makes the store calls; the tables are pure functions of records, tested
without a browser."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dash import html

from fleetwatch.catalogue import catalogue
from fleetwatch.dashboards.components import ago, clock
from fleetwatch.pipeline.store.base import (
    Event,
    EventGroup,
    Point,
    gpu_device,
    gpu_index,
    group_events,
    group_order,
)
from fleetwatch.xids import describe

EVENT_KINDS = ("xid", "gpu_state", "node_state")
EVENTS_SHOWN = 50  # repeat groups, the newest; the rest are in the store
# At most this many of the newest events are counted per refresh (a store that groups in
# its query: ~0.5 s); a range with more says from when its counts are.
EVENTS_READ = 200_000
# The counters an RMA decision reads, in the order a reliability engineer goes through them.
COUNTERS = ("gpu_ecc_dbe_volatile_total", "gpu_ecc_dbe_aggregate_total",
            "gpu_ecc_sbe_volatile_total", "gpu_ecc_sbe_aggregate_total",
            "gpu_retired_pages_dbe", "gpu_retired_pages_sbe", "gpu_retired_pages_pending",
            "gpu_remapped_rows_uncorrectable", "gpu_remapped_rows_correctable",
            "gpu_row_remap_pending", "gpu_row_remap_failure", "gpu_pcie_replay_total",
            "gpu_nvlink_crc_errors_total", "gpu_nvlink_replay_errors_total",
            "gpu_nvlink_recovery_errors_total", "gpu_nvlink_links_down")


@dataclass(frozen=True, slots=True)
class Counter:
    metric: str
    newest: float
    newest_ts: float
    rise: float  # the sum of its rises over the range: a reset (driver reload) is no fall


@dataclass(frozen=True, slots=True)
class NodeErrors:
    events: tuple[EventGroup, ...]   # repeat groups, the newest last time first
    counters: tuple[Counter, ...]    # of the GPU brought forward; () without one
    gpu: int | None
    counted_from: float | None = None  # the range held more events: counted from here


def counter(metric: str, points: Sequence[Point]) -> Counter | None:
    """One GPU's counter over the range (points in time order); None without points."""
    if not points:
        return None
    values = [v for _, _, v in points]
    rise = sum(b - a for a, b in zip(values, values[1:]) if b > a)
    return Counter(metric, values[-1], points[-1][1] / 1000, rise)


def read_errors(store: Any, node: str, start_s: float, end_s: float,
                gpu: int | None, cluster: str | None = None) -> NodeErrors:
    """The node's events in [start, end) as repeat groups and, with ``gpu``, that GPU's
    error counters; no events from a store that keeps none. ``cluster``: the node of that
    cluster only (events are read by node name and kept of that cluster). A store that
    counts repeats in its query (SQLite) is asked for the groups: a GPU's XID once a second
    stores 2.6 million in 30 days, read one by one at each refresh otherwise."""
    counted_from = None
    if callable(getattr(store, "event_groups", None)):
        events = tuple(g for g in store.event_groups(start_s, end_s, node, EVENT_KINDS,
                                                     EVENTS_READ)
                       if cluster is None or g.last.cluster == cluster)
        if sum(g.count for g in events) >= EVENTS_READ:
            counted_from = min(g.first_ts for g in events)
    elif callable(getattr(store, "events", None)):
        events = tuple(group_events(e for e in store.events(start_s, end_s, node=node,
                                                            kinds=EVENT_KINDS)
                                    if cluster is None or e.cluster == cluster))
    else:
        events = ()
    counters: list[Counter] = []
    if gpu is not None:
        for metric in COUNTERS:
            points = store.range(metric, int(start_s * 1000), int(end_s * 1000), node=node,
                                 device=gpu_device(gpu), cluster=cluster)
            found = counter(metric, points)
            if found is not None:
                counters.append(found)
    return NodeErrors(events, tuple(counters), gpu, counted_from)


def _device(device: str) -> str:
    index = gpu_index(device)
    return f"GPU {index}" if index is not None else device


def event_what(e: Event) -> tuple[str, str, str]:
    """(what happened, what it means or what to do, severity class) of one event."""
    if e.kind == "xid":
        x = describe(e.code)
        return f"XID {e.code} · {x.name}", f"{x.meaning}. {x.action}", x.severity
    if e.kind == "gpu_state":
        bad = e.value not in ("ok", "")
        return (f"GPU state: {e.value or 'unknown'}",
                ("NVML reports the GPU lost (fallen off the bus, or it cannot be opened)"
                 if e.value == "lost" else ""),
                "critical" if bad else "info")
    return f"node {e.value or e.kind}", "no frame from the node" if e.value == "silent" else "", (
        "warning" if e.value == "silent" else "info")


def _when(g: EventGroup, now_s: float) -> str:
    e = g.last
    newest = f"{clock(e.ts)} UTC · {ago(e.ts, now_s)}"
    if g.count == 1:
        return newest
    return f"{g.count:,}×, last {newest}, first {clock(g.first_ts)} UTC"


def events_table(groups: Sequence[EventGroup], now_s: float, empty: str,
                 counted_from: float | None = None) -> html.Div:
    """One row per GPU and event (repeats counted, with their first and last time), the
    newest ``EVENTS_SHOWN`` first; a line for those left out, and one saying from when
    the events are counted where the range held more than were read."""
    if not groups:
        return html.Div(empty, className="empty-note", id="node-events-empty")
    ordered = sorted(groups, key=group_order)
    shown, left = ordered[:EVENTS_SHOWN], ordered[EVENTS_SHOWN:]
    rows = []
    for g in shown:
        e = g.last
        what, means, severity = event_what(e)
        rows.append(html.Tr(className="event-row", **{"data-kind": e.kind}, children=[
            html.Td(_when(g, now_s), className="since"),
            html.Td(_device(e.device), className="device"),
            html.Td(what, className=f"sev sev-{severity}", title=e.text or None),
            html.Td(means, className="action")]))
    if left:
        rows.append(html.Tr(html.Td(
            f"and {len(left):,} older in the range ({sum(g.count for g in left):,} events)",
            colSpan=4, className="panel-hint"), className="more-row"))
    if counted_from is not None:
        rows.append(html.Tr(html.Td(
            f"counted over the newest {EVENTS_READ:,} events, from {clock(counted_from)} "
            "UTC: older ones in the range are not read (a narrower range reads them)",
            colSpan=4, className="panel-hint"), className="more-row"))
    head = html.Tr([html.Th(h) for h in ("Time", "GPU", "Event", "Meaning · action")])
    return html.Div(html.Table([html.Thead(head), html.Tbody(rows)], className="alerts"),
                    id="node-event-table", className="alerts-wrap")


def _value(metric: str, value: float) -> str:
    if catalogue()[metric].unit == "bool":
        return "yes" if value else "no"
    return f"{value:,.0f}"


def counters_table(errors: NodeErrors, now_s: float, node: str) -> html.Div:
    """The GPU's error counters: the newest value and the rise over the range."""
    if errors.gpu is None:
        return html.Div("Open a GPU (an alert's row, a chart's GPU, or ?gpu=N in the address) "
                        "to see its ECC, retired-page, row-remap, PCIe and NVLink counters",
                        className="empty-note", id="node-counters-empty")
    if not errors.counters:
        return html.Div(f"GPU {errors.gpu} of {node} reports no error counters in the range",
                        className="empty-note", id="node-counters-empty")
    cat = catalogue()
    rows = [html.Tr(className="counter-row", **{"data-metric": c.metric}, children=[
        html.Td(cat[c.metric].help, title=c.metric),
        html.Td(_value(c.metric, c.newest), className="num",
                title=f"at {clock(c.newest_ts)} UTC ({ago(c.newest_ts, now_s)})"),
        html.Td(f"+{c.rise:,.0f}" if c.rise else "", className="num")])
        for c in errors.counters]
    head = html.Tr([html.Th(h) for h in ("Counter", "Newest", "Rise in range")])
    return html.Div(html.Table([html.Thead(head), html.Tbody(rows)], className="alerts"),
                    id="node-counter-table", className="alerts-wrap")
