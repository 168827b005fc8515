"""The alerts page (``/alerts``): active alerts, then those resolved in the last day."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
from dash import Input, Output, dcc, html

from fleetwatch.dashboards import components
from fleetwatch.dashboards.data import read_alerts
from fleetwatch.pipeline.store.base import Store, StoreError

PATH = "/alerts"


def layout(refresh_s: float) -> html.Div:
    return html.Div(className="page", children=[
        dcc.Interval(id="alerts-tick", interval=int(refresh_s * 1000)),
        html.Div(className="page-head", children=[
            html.H1("Alerts"), html.Div(id="alerts-updated", className="updated")]),
        html.Div(id="alerts-notice"),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Active"), html.Span("firing first", className="panel-hint")]),
            html.Div(id="alerts-active"),
        ]),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Resolved"), html.Span("last 24 hours", className="panel-hint")]),
            html.Div(id="alerts-resolved"),
        ]),
    ])


def register(app: dash.Dash, store: Store, clock: Callable[[], float]) -> None:
    @app.callback(Output("alerts-active", "children"), Output("alerts-resolved", "children"),
                  Output("alerts-notice", "children"), Output("alerts-updated", "children"),
                  Input("alerts-tick", "n_intervals"))
    def refresh(_n: int | None) -> tuple[Any, ...]:
        now = clock()
        try:
            active, resolved = read_alerts(store, now)
        except StoreError as exc:
            return (dash.no_update, dash.no_update,
                    components.notice(f"Store unavailable: {exc}"), dash.no_update)
        return (components.alert_table(active, now, "active-alert-table"),
                components.alert_table(resolved, now, "resolved-alert-table",
                                       empty="Nothing resolved in the last 24 hours"),
                None, components.updated_stamp(now))
