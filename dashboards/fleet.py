"""The fleet page (``/``): a temperature heatmap, the summary strip, active alerts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
from dash import Input, Output, dcc, html

from fleetwatch.dashboards import components, figures
from fleetwatch.dashboards.data import read_fleet
from fleetwatch.pipeline.store.base import Store, StoreError

PATH = "/"


def layout(refresh_s: float) -> html.Div:
    # Each page carries its own Interval: it is created with the page, so the
    # page's callback runs at once on arrival instead of waiting a tick.
    return html.Div(className="page", children=[
        dcc.Interval(id="fleet-tick", interval=int(refresh_s * 1000)),
        html.Div(className="page-head", children=[
            html.H1("Fleet"), html.Div(id="fleet-updated", className="updated")]),
        html.Div(id="fleet-notice"),
        html.Div(id="fleet-summary", className="summary"),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("GPU temperature"),
                html.Span("newest sample per GPU · click a row for the node · "
                          "outlined: active alert", className="panel-hint"),
            ]),
            dcc.Graph(id="fleet-heatmap", figure=figures.empty_figure("Loading…"),
                      config={"displayModeBar": False}),
        ]),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Active alerts"), dcc.Link("all alerts →", href="/alerts",
                                                   className="panel-hint")]),
            html.Div(id="fleet-alerts"),
        ]),
    ])


def register(app: dash.Dash, store: Store, clock: Callable[[], float]) -> None:
    @app.callback(
        Output("fleet-summary", "children"), Output("fleet-heatmap", "figure"),
        Output("fleet-alerts", "children"), Output("fleet-notice", "children"),
        Output("fleet-updated", "children"), Input("fleet-tick", "n_intervals"))
    def refresh(_n: int | None) -> tuple[Any, ...]:
        now = clock()
        try:
            view = read_fleet(store, now)
        except StoreError as exc:
            return (dash.no_update, dash.no_update, dash.no_update,
                    components.notice(f"Store unavailable: {exc}"), dash.no_update)
        if view.cells:
            fig = figures.fleet_heatmap(view.cells, view.alerts)
            # Keep hover and zoom across refreshes of the same grid (a new grid starts clean).
            fig.update_layout(uirevision=f"fleet:{len(view.cells)}")
            notice = None
        else:  # one sentence, the same in the banner and on the empty heatmap
            text = components.no_data_text(view, now)
            fig, notice = figures.empty_figure(text), components.notice(text, "fleet-empty")
        return (components.summary(view, now), fig,
                components.alert_table(view.alerts, now, "active-alerts"),
                notice, components.updated_stamp(now))

    @app.callback(Output("url", "pathname"), Input("fleet-heatmap", "clickData"),
                  prevent_initial_call=True)
    def open_node(click: dict[str, Any] | None) -> str:
        points = (click or {}).get("points") or []
        if not points or not points[0].get("y"):
            raise dash.exceptions.PreventUpdate
        return components.node_href(figures.node_from_label(points[0]["y"]))
