"""The node page (``/node/<name>``): the last hour of each GPU, faults and alerts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
from dash import Input, Output, dcc, html

from fleetwatch.catalogue import catalogue
from fleetwatch.dashboards import components, figures
from fleetwatch.dashboards.data import POWER, TEMP, UTIL, read_node
from fleetwatch.pipeline.store.base import Store, StoreError

PREFIX = "/node/"
# (metric, panel title): the title is short screen text, the unit and the
# longer description come from the catalogue.
PANELS: tuple[tuple[str, str], ...] = ((TEMP, "Temperature"), (POWER, "Power"),
                                       (UTIL, "Utilization"))


def graph_id(metric: str) -> str:
    return f"node-graph-{metric}"


def layout(node: str, refresh_s: float) -> html.Div:
    panels = [
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2(title, title=catalogue()[metric].help),
                html.Span(f"{figures.unit(metric)} · last hour · UTC", className="panel-hint")]),
            dcc.Graph(id=graph_id(metric), figure=figures.empty_figure("Loading…", 220),
                      config={"displayModeBar": False}),
        ]) for metric, title in PANELS]
    return html.Div(className="page", children=[
        dcc.Interval(id="node-tick", interval=int(refresh_s * 1000)),
        dcc.Store(id="node-name", data=node),
        html.Div(className="page-head", children=[
            html.H1(id="node-title", children=node),
            html.Div(id="node-updated", className="updated")]),
        dcc.Link("← fleet", href="/", className="back-link"),
        html.Div(id="node-notice"),
        html.Div(className="node-grid", children=panels),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[html.H2("Alerts on this node")]),
            html.Div(id="node-alerts"),
        ]),
    ])


def register(app: dash.Dash, store: Store, clock: Callable[[], float]) -> None:
    outputs = [Output("node-title", "children"), Output("node-notice", "children"),
               Output("node-alerts", "children"), Output("node-updated", "children")]
    outputs += [Output(graph_id(metric), "figure") for metric, _ in PANELS]

    @app.callback(*outputs, Input("node-tick", "n_intervals"), Input("node-name", "data"))
    def refresh(_n: int | None, node: str) -> tuple[Any, ...]:
        now = clock()
        try:
            view = read_node(store, node, now)
        except StoreError as exc:
            return (dash.no_update, components.notice(f"Store unavailable: {exc}"),
                    *[dash.no_update] * (len(outputs) - 2))
        has_data = any(view.series.values())
        title = f"{node}  ·  {view.rack}" if view.rack else node
        notice = None if has_data else components.notice(
            f"No data from {node} in the last hour", "node-empty")
        figs = []
        for i, (metric, label) in enumerate(PANELS):
            fig = figures.node_metric_figure(metric, label, view.series.get(metric, {}),
                                             view.start_ms, view.end_ms, view.annotations,
                                             view.alerts, primary=i == 0)
            fig.update_layout(uirevision=node)  # keep the user's zoom across refreshes
            figs.append(fig)
        table = components.alert_table(view.alerts, now, "node-alert-table",
                                       empty="No alerts on this node in the last day",
                                       link_nodes=False)
        return (title, notice, table, components.updated_stamp(now), *figs)
