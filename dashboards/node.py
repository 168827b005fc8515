"""The node page (``/node/<name>?cluster=c1&range=6h&gpu=3``): each GPU over the range (the
last hour by default), faults and alerts; ``gpu`` brings one GPU forward. Node names repeat
across clusters: ``cluster`` names the machine; a bare name that is in several clusters
lists them, one link each, rather than draw two machines as one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

import dash
from dash import Input, Output, State, dcc, html

from fleetwatch.catalogue import catalogue
from fleetwatch.dashboards import (
    alert_tables,
    boards,
    components,
    figures,
    job,
    live,
    node_errors,
    timerange,
)
from fleetwatch.dashboards.data import (
    FALLBACK_SLOWDOWN_C,
    POWER,
    RESOLVED_WINDOW_S,
    TEMP,
    UTIL,
    GpuSeries,
    read_data_end,
    read_mutes,
    silent_nodes,
)
from fleetwatch.dashboards.job_data import read_current_jobs
from fleetwatch.dashboards.node_data import read_node
from fleetwatch.pipeline.store.base import Store, StoreError

PREFIX = "/node/"
DEFAULT_RANGE = "1h"
# (metric, panel title): the title is short screen text, the unit and the
# longer description come from the catalogue.
PANELS: tuple[tuple[str, str], ...] = ((TEMP, "Temperature"), (POWER, "Power"),
                                       (UTIL, "Utilization"))


def graph_id(metric: str) -> str:
    return f"node-graph-{metric}"


def hint_id(metric: str) -> str:
    return f"node-hint-{metric}"


def _hint(metric: str, rng: str) -> str:
    return f"{figures.unit(metric)} · {timerange.label(rng)} · UTC"


def layout(node: str, refresh_s: float, gpu: int | None = None,
           rng: str = DEFAULT_RANGE, cluster: str | None = None) -> html.Div:
    """The page of ``node`` (of ``cluster``) over range ``rng``; ``gpu`` (from an alert
    row's ``?gpu=N``) is brought forward."""
    panels = [
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2(title, title=catalogue()[metric].help),
                html.Span(_hint(metric, rng), id=hint_id(metric), className="panel-hint")]),
            dcc.Graph(id=graph_id(metric), figure=figures.empty_figure("Loading…", 220),
                      config={"displayModeBar": False}),
        ]) for metric, title in PANELS]
    return html.Div(className="page", children=[
        dcc.Interval(id="node-tick", interval=int(refresh_s * 1000)),
        dcc.Store(id="node-name", data=node),
        dcc.Store(id="node-cluster", data=cluster),
        dcc.Store(id="node-gpu", data=gpu),
        dcc.Store(id=components.zoom_store("node")),
        html.Div(className="page-head", children=[
            html.H1([html.Span(id="node-title", children=node),
                     html.Span(f"GPU {gpu}" if gpu is not None else "", id="node-focus",
                               className="focus")]),
            timerange.picker("node", rng),
            html.Div(id="node-updated", className="updated")]),
        dcc.Link("← fleet", href="/", className="back-link"),
        html.Div(id="node-jobs", className="node-jobs"),
        *live.parts("node"),  # the banner while the dashboard is away
        html.Div(id="node-notice"),
        html.Div(className="node-grid", children=panels),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[html.H2("Alerts on this node")]),
            html.Div(id="node-alerts"),
        ]),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("GPU boards"),
                html.Span("serial, UUID and PCI bus id in each slot; replacements",
                          className="panel-hint")]),
            html.Div(id="node-boards"),
        ]),
        html.Div(className="node-grid two", children=[
            html.Section(className="panel", children=[
                html.Div(className="panel-head", children=[
                    html.H2("Events"),
                    html.Span("XIDs, GPUs lost · newest first · from the store's events",
                              className="panel-hint")]),
                html.Div(id="node-events")]),
            html.Section(className="panel", children=[
                html.Div(className="panel-head", children=[
                    html.H2("Error counters"),
                    html.Span(f"GPU {gpu} · over the range" if gpu is not None else
                              "of the GPU brought forward", className="panel-hint")]),
                html.Div(id="node-counters")])]),
    ])


def focus_of(search: str | None) -> int | None:
    """The GPU index of ``?gpu=N`` in the address; None when absent or not a number."""
    values = parse_qs((search or "").lstrip("?")).get("gpu", [])
    return int(values[0]) if values and values[0].isdigit() else None


def cluster_of(search: str | None) -> str | None:
    """The cluster of ``?cluster=`` in the address; None when absent."""
    values = parse_qs((search or "").lstrip("?")).get("cluster", [])
    return values[0] if values and values[0] else None


def title_text(node: str, cluster: str | None, rack: str | None) -> str:
    return "  ·  ".join(x for x in (node, cluster, rack) if x)


def choose_cluster(node: str, clusters: tuple[str, ...], gpu: int | None,
                   rng: str | None) -> html.Div:
    """What a bare ``/node/<name>`` in several clusters shows: one link per cluster (as the
    job page does for a job id that ran in several)."""
    carry = rng if rng and rng != DEFAULT_RANGE else None
    return html.Div(id="node-clusters", className="notice", children=[
        f"{node} is a node name in {len(clusters)} clusters: pick one: ",
        *[part for i, c in enumerate(clusters) for part in (
            ", " if i else "",
            dcc.Link(f"{node} in cluster {c}", href=components.node_href(node, gpu, carry, c),
                     className="cluster-link"))]])


def elsewhere_notice(node: str, asked: str, clusters: tuple[str, ...], gpu: int | None,
                     rng: str | None) -> html.Div:
    """What ``/node/<name>?cluster=X`` says when X has no such node but other clusters do:
    where it reports, with a link to each (not "no data" alone)."""
    carry = rng if rng and rng != DEFAULT_RANGE else None
    return html.Div(id="node-elsewhere", className="notice", children=[
        f"No data from {asked}/{node} in the {timerange.label(rng or DEFAULT_RANGE)}; "
        f"{node} reports in cluster{'s' if len(clusters) > 1 else ''} ",
        *[part for i, c in enumerate(clusters) for part in (
            ", " if i else "",
            dcc.Link(f"{node} in cluster {c}", href=components.node_href(node, gpu, carry, c),
                     className="cluster-link"))]])


def no_gpu_text(node: str, gpu: int, gpus: list[int]) -> str:
    """What the page says when the address asks for a GPU the node did not report."""
    shown = ", ".join(map(str, gpus))
    return (f"{node} has no GPU {gpu} in the range: it reports GPU{'s' if len(gpus) != 1 else ''}"
            f" {shown}")


def newest_ms(series: Mapping[str, GpuSeries]) -> int | None:
    """The node's newest sample of any metric and GPU (None: none in the range): a node
    silent past ``STALE_S`` has its jobs shown as last seen."""
    return max((points[-1][0] for per_gpu in series.values() for points in per_gpu.values()
                if points), default=None)


def register(app: dash.Dash, store: Store, clock: Callable[[], float],
             temp_limit_c: float | None = None,
             fallback_slowdown_c: float = FALLBACK_SLOWDOWN_C) -> None:
    """``temp_limit_c``: the site's temperature limit, drawn on the temperature panel (else
    the GPUs' slowdown temperatures, ``fallback_slowdown_c`` where neither NVML nor the parts
    table gives one, drawn as assumed)."""
    outputs = [Output("node-title", "children"), Output("node-notice", "children"),
               Output("node-alerts", "children"), Output("node-updated", "children"),
               Output("node-boards", "children"), Output("node-events", "children"),
               Output("node-counters", "children"), Output("node-jobs", "children")]
    outputs += [Output(graph_id(metric), "figure") for metric, _ in PANELS]
    outputs += [Output(hint_id(metric), "children") for metric, _ in PANELS]

    @app.callback(*outputs, Input("node-tick", "n_intervals"), Input("node-name", "data"),
                  Input("node-gpu", "data"), Input("node-range", "value"),
                  Input("node-cluster", "data"),
                  State(components.zoom_store("node"), "data"),
                  running=[(Output("node-tick", "disabled"), True, False)])  # see fleet.py
    def refresh(_n: int | None, node: str, gpu: int | None, rng: str | None,
                asked: str | None, zoom: dict[str, Any] | None) -> tuple[Any, ...]:
        now = clock()
        rng = rng or DEFAULT_RANGE
        start, _ = timerange.window(rng, now)
        try:
            view = read_node(store, node, now, window_s=now - start, temp_limit_c=temp_limit_c,
                             cluster=asked, fallback_slowdown_c=fallback_slowdown_c)
            if view.ambiguous:
                return (title_text(node, None, None), choose_cluster(
                            node, view.ambiguous, gpu, rng), None,
                        components.updated_stamp(now), None, None, None, None,
                        *[figures.empty_figure("Pick a cluster above", 220) for _ in PANELS],
                        *[_hint(metric, rng) for metric, _ in PANELS])
            cluster = view.cluster
            muted = alert_tables.notes(view.alerts, *read_mutes(store, view.alerts, now), now)
            board_panel = boards.panel(store, node, now, cluster)
            errors = node_errors.read_errors(store, node, start, view.end_ms / 1000, gpu,
                                             cluster)
            ended = read_data_end(store, view.alerts, now, cluster)
            jobs = read_current_jobs(store, node, now, cluster)
        except StoreError as exc:
            text = f"Store unavailable: {exc}"
            # The graphs of the last read stay under the banner; a page that never read
            # (its first refresh: no tick yet) says why they are empty, not "Loading…".
            figs = [dash.no_update if _n else figures.empty_figure(text, 220) for _ in PANELS]
            return (dash.no_update, components.notice(text),
                    dash.no_update, components.failed_stamp(now),
                    *[dash.no_update] * (len(outputs) - 4 - 2 * len(PANELS)),
                    *figs, *[dash.no_update] * len(PANELS))
        has_data = any(view.series.values())
        title = title_text(node, cluster, view.rack)
        where = f"{cluster}/{node}" if asked else node
        notice = None if has_data else components.notice(
            f"No data from {where} in the {timerange.label(rng)}", "node-empty")
        if not has_data and asked and view.elsewhere:
            notice = elsewhere_notice(node, asked, view.elsewhere, gpu, rng)
        gpus = sorted({i for per_gpu in view.series.values() for i in per_gpu})
        if has_data and gpu is not None and gpu not in gpus:
            notice = components.notice(no_gpu_text(node, gpu, gpus), "node-no-gpu")
        figs = []
        for i, (metric, label) in enumerate(PANELS):
            fig = figures.node_metric_figure(metric, label, view.series.get(metric, {}),
                                             view.start_ms, view.end_ms, view.annotations,
                                             view.alerts, primary=i == 0,
                                             limit=view.limits.get(metric), focus=gpu,
                                             limit_lines=view.temp_lines if metric == TEMP
                                             else ())
            # Keep the user's zoom (and legend clicks) across refreshes; a new range starts
            # clean.
            fig.update_layout(uirevision=f"{cluster}:{node}:{rng}")
            figs.append(figures.hold_zoom(fig, components.zoomed(zoom, rng, graph_id(metric))))
        alerts_over = rng if now - start > RESOLVED_WINDOW_S else "24h"
        table = alert_tables.alert_table(
            view.alerts, now, "node-alert-table", rng=rng, muted=muted, ended=ended,
            empty=f"No alerts on this node in the {timerange.label(alerts_over)}")
        events = node_errors.events_table(
            errors.events, now, f"No XID or lost GPU on this node in the {timerange.label(rng)}",
            errors.counted_from)
        return (title, notice, table, components.updated_stamp(now), board_panel, events,
                node_errors.counters_table(errors, now, node),
                job.jobs_line(jobs, cluster, newest_ms(view.series), now,
                              silent=bool(silent_nodes(view.alerts))),
                *figs,
                *[_hint(metric, rng) for metric, _ in PANELS])

    components.keep_zoom(app, "node", [graph_id(metric) for metric, _ in PANELS], "node-range")

    @app.callback(Output("url", "search", allow_duplicate=True),
                  Output(components.SHOWN, "data", allow_duplicate=True),
                  Input("node-range", "value"), State("node-gpu", "data"),
                  State("node-cluster", "data"),
                  State("url", "search"), State("url", "pathname"),
                  prevent_initial_call=True)
    def link(rng: str, gpu: int | None, cluster: str | None, search: str | None,
             path: str | None) -> tuple[str, list[str]]:
        if not timerange.new_search(search, DEFAULT_RANGE, rng, cluster):
            raise dash.exceptions.PreventUpdate
        search = timerange.page_search(rng, gpu, cluster)
        return search, components.address(path, search)
