"""The alerts page (``/alerts?range=7d``): active alerts, then those resolved in the range
(the last day by default)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from fleetwatch.dashboards import components, timerange
from fleetwatch.dashboards.data import read_alerts
from fleetwatch.pipeline.store.base import Store, StoreError

PATH = "/alerts"
DEFAULT_RANGE = "24h"


def layout(refresh_s: float, search: str | None = None) -> html.Div:
    q = timerange.parse(search, DEFAULT_RANGE)
    return html.Div(className="page", children=[
        dcc.Interval(id="alerts-tick", interval=int(refresh_s * 1000)),
        html.Div(className="page-head", children=[
            html.H1("Alerts"), timerange.picker("alerts", q.range),
            html.Div(id="alerts-updated", className="updated")]),
        html.Div(id="alerts-notice"),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Active"), html.Span("firing first · active now, whatever the range",
                                             className="panel-hint")]),
            html.Div(id="alerts-active"),
        ]),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Resolved"), html.Span(timerange.label(q.range), id="alerts-resolved-hint",
                                               className="panel-hint")]),
            html.Div(id="alerts-resolved"),
        ]),
    ])


def register(app: dash.Dash, store: Store, clock: Callable[[], float]) -> None:
    @app.callback(Output("alerts-active", "children"), Output("alerts-resolved", "children"),
                  Output("alerts-notice", "children"), Output("alerts-updated", "children"),
                  Output("alerts-resolved-hint", "children"),
                  Input("alerts-tick", "n_intervals"), Input("alerts-range", "value"))
    def refresh(_n: int | None, rng: str | None) -> tuple[Any, ...]:
        now = clock()
        rng = rng or DEFAULT_RANGE
        start, _ = timerange.window(rng, now)
        try:
            active, resolved = read_alerts(store, now, now - start)
        except StoreError as exc:
            return (dash.no_update, dash.no_update,
                    components.notice(f"Store unavailable: {exc}"), dash.no_update,
                    dash.no_update)
        # A range the user picked goes with them to a node's page; the default does not
        # (the node page has its own).
        carry = rng if rng != DEFAULT_RANGE else None
        return (components.alert_table(active, now, "active-alert-table", rng=carry),
                components.alert_table(resolved, now, "resolved-alert-table", rng=carry,
                                       empty=f"Nothing resolved in the {timerange.label(rng)}"),
                None, components.updated_stamp(now), timerange.label(rng))

    @app.callback(Output("url", "search", allow_duplicate=True),
                  Input("alerts-range", "value"), State("url", "search"),
                  prevent_initial_call=True)
    def link(rng: str, search: str | None) -> str:
        if not timerange.new_search(search, DEFAULT_RANGE, rng):
            raise dash.exceptions.PreventUpdate
        return timerange.Query(rng).search()
