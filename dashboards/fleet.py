"""The fleet page (``/?range=6h&cluster=c1``): a temperature heatmap, the summary strip,
active alerts; of every cluster, or of the one the cluster picker (``?cluster=``) names.

The heatmap and the summary are the fleet now, whatever the range: the range is
the window of the node and alert pages opened from here (a heatmap row, an alert,
"all alerts"), so a link keeps the span the user chose."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html

from fleetwatch.dashboards import (
    alert_tables,
    alerts,
    components,
    figures,
    job,
    live,
    summary_strip,
    timerange,
)
from fleetwatch.dashboards.data import FleetView, GpuKey, read_fleet, read_mutes
from fleetwatch.dashboards.fleet_jobs import FleetJobs
from fleetwatch.dashboards.fleet_parts import FleetParts
from fleetwatch.pipeline.store.base import Store, StoreError

PATH = "/"
DEFAULT_RANGE = "1h"
RANGE_NOTE = ("The heatmap and the summary show the fleet now. The range is the window "
              "of the node and alert pages opened from here: a heatmap row, an alert, "
              "all alerts.")


def _carry(rng: str | None) -> str | None:
    """A range the user picked goes with them; the default leaves each page its own."""
    return rng if rng and rng != DEFAULT_RANGE else None


def alerts_href(rng: str | None, cluster: str | None = None) -> str:
    carry = _carry(rng)
    if not carry and not cluster:
        return alerts.PATH
    return alerts.PATH + timerange.Query(carry or alerts.DEFAULT_RANGE,
                                         cluster=cluster or None).search()


def layout(refresh_s: float, search: str | None = None) -> html.Div:
    q = timerange.parse(search, DEFAULT_RANGE)
    # Each page carries its own Interval: it is created with the page, so the
    # page's callback runs at once on arrival instead of waiting a tick.
    return html.Div(className="page", children=[
        dcc.Interval(id="fleet-tick", interval=int(refresh_s * 1000)),
        dcc.Store(id="fleet-last"),  # summary_strip.last_read of the last read that worked
        dcc.Store(id="fleet-sent"),  # fingerprints of the heatmap and table on screen (unsent)
        dcc.Store(id="fleet-places"),  # how heatmap rows name nodes: ``places``
        html.Div(className="page-head", children=[
            html.H1("Fleet"),
            components.cluster_picker("fleet", q.cluster),
            html.Div(className="range-with-note", title=RANGE_NOTE, children=[
                timerange.picker("fleet", q.range),
                html.Span("range: for the node and alert pages opened from here",
                          id="fleet-range-note",
                          className="panel-hint")]),
            job.find_box(),
            html.Div(id="fleet-updated", className="updated")]),
        *live.parts("fleet"),  # the banner while the dashboard is away
        html.Div(id="fleet-notice"),
        html.Div(id="fleet-summary", className="summary"),
        # Before the heatmap: what is broken, where and since when is the first screen of
        # the wall; a 250-node heatmap is 4,000 px tall and pushed it 4 screens down.
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Active alerts"), dcc.Link("all alerts →",
                                                   href=alerts_href(q.range, q.cluster),
                                                   id="fleet-alerts-link",
                                                   className="panel-hint")]),
            html.Div(id="fleet-alerts"),
        ]),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("GPU temperature"),
                html.Span("newest sample per GPU · click a row for the node · "
                          "outlined: active alert", className="panel-hint"),
            ]),
            dcc.Graph(id="fleet-heatmap", figure=figures.empty_figure("Loading…"),
                      config={"displayModeBar": False}),
        ]),
    ])


def parts(view: FleetView, now: float, rng: str | None, muted: Mapping[str, str],
          jobs: Mapping[GpuKey, str] | None = None,
          models: Mapping[GpuKey, str] | None = None
          ) -> tuple[Any, go.Figure, html.Div, html.Div | None]:
    """What a refresh that read ``view`` shows: the summary, the heatmap (each GPU's job
    and user from ``jobs`` and its part from ``models`` in its hover), the active alerts (at
    most ``alert_tables.FLEET_SHOWN`` rows: the first screen) and the notice. Each is bounded
    by the fleet's size or a cap, not by how many alerts a storm raised."""
    if view.cells:
        fig = figures.fleet_heatmap(view.cells, view.alerts, jobs, silent=view.silent,
                                    models=models)
        # Keep hover and zoom across refreshes of the same grid (a new grid starts clean).
        fig.update_layout(uirevision=f"fleet:{view.cluster or ''}:{len(view.cells)}")
        notice = None
    else:  # one sentence, the same in the banner and on the empty heatmap
        text = summary_strip.no_data_text(view, now)
        fig, notice = figures.empty_figure(text), components.notice(text, "fleet-empty")
    return (summary_strip.summary(view, now), fig,
            alert_tables.alert_table(view.alerts, now, "active-alerts", rng=_carry(rng),
                                     muted=muted, limit=alert_tables.FLEET_SHOWN,
                                     clusters=view.many_clusters,
                                     ended=None if view.cells or not view.last_ms
                                     else view.last_ms / 1000),
            notice)


def places(view: FleetView) -> dict[str, Any]:
    """What a heatmap click needs to open the right node: whether rows are named
    ``cluster/node``, the clusters seen, the one shown."""
    return {"many": view.many_clusters, "clusters": list(view.clusters),
            "cluster": view.cluster}


def clicked_href(label: str, held: dict[str, Any] | None, rng: str | None) -> str:
    """The node page of a heatmap row ``label``, in its cluster."""
    held = held or {}
    clusters = [held["cluster"]] if held.get("cluster") else list(held.get("clusters") or [])
    cluster, name = figures.place_from_label(label, clusters, bool(held.get("many")))
    return components.node_href(name, rng=_carry(rng), cluster=cluster)


def unsent(values: tuple[Any, ...], on_screen: list[str] | None
           ) -> tuple[tuple[Any, ...], list[str]]:
    """``values``, each replaced by ``dash.no_update`` where the page already shows it (its
    fingerprint is in ``on_screen``, as the last refresh left it); and the fingerprints now.
    An unchanged heatmap or alert table is not sent again: 8,000 cells are half a megabyte."""
    prints = [alerts.digest(v) for v in values]
    held = on_screen or []
    return (tuple(dash.no_update if i < len(held) and held[i] == p else v
                  for i, (v, p) in enumerate(zip(values, prints, strict=True))), prints)


def register(app: dash.Dash, store: Store, clock: Callable[[], float],
             store_problem: Callable[[], str | None] | None = None) -> None:
    """``store_problem``: what the writer of the store says is wrong with it (None: nothing,
    or not known here), shown over a page whose reads still work (``fleetwatch up``: its
    processor's writes fail on a full disk while the page reads what is there)."""
    jobs_now = FleetJobs()  # the fleet's job events, read once and then the recent ones
    parts_now = FleetParts()  # each GPU's part, from the boards its frames named
    @app.callback(
        Output("fleet-summary", "children"), Output("fleet-heatmap", "figure"),
        Output("fleet-alerts", "children"), Output("fleet-notice", "children"),
        Output("fleet-updated", "children"), Output("fleet-last", "data"),
        Output("fleet-sent", "data"), Output("fleet-places", "data"),
        Output(components.cluster_picker_id("fleet"), "options"),
        Input("fleet-tick", "n_intervals"), Input("fleet-range", "value"),
        Input(components.cluster_picker_id("fleet"), "value"),
        State("fleet-last", "data"), State("fleet-sent", "data"),
        running=[(Output("fleet-tick", "disabled"), True, False)])
    def refresh(_n: int | None, rng: str | None, cluster: str | None,
                last: dict[str, Any] | None, on_screen: list[str] | None) -> tuple[Any, ...]:
        # ``running``: no tick while a read is out. Dash drops the answer of a request that a
        # newer one superseded, so a store slower than the refresh (a hung VictoriaMetrics
        # answers only at its timeout) would never get its error onto the screen.
        # A request that gets no answer at all leaves the tick disabled: live.py re-arms it.
        now = clock()
        try:
            view = read_fleet(store, now, cluster or None)
            muted = alert_tables.notes(view.alerts, *read_mutes(store, view.alerts, now), now)
            jobs = jobs_now.read(store, now) if view.cells else {}
            models = parts_now.read(store, now) if view.cells else {}
        except StoreError as exc:
            text = f"Store unavailable: {exc}"
            # The heatmap and the alerts of the last read stay, under the banner; the tiles
            # say what is known now. A page that never read says why it is empty.
            return (summary_strip.unavailable_summary(last, now),
                    dash.no_update if last else figures.empty_figure(text),
                    dash.no_update, components.notice(text),
                    components.failed_stamp(now), dash.no_update, dash.no_update,
                    dash.no_update, dash.no_update)
        summary, fig, table, notice = parts(view, now, rng, muted, jobs, models)
        (fig, table), sent = unsent((fig, table), on_screen)
        stamp = components.updated_stamp(now)
        problem = store_problem() if store_problem is not None else None
        if problem:  # the data stop at the last write that worked: said over them
            notice = [components.notice(problem, "fleet-store-problem"),
                      *([notice] if notice else [])]
            stamp += " · store not writable"
        return (summary, fig, table, notice, stamp,
                summary_strip.last_read(view, now), sent, places(view),
                components.cluster_options(view.clusters, cluster))

    @app.callback(Output("url", "href"), Input("fleet-heatmap", "clickData"),
                  State("fleet-range", "value"), State("fleet-places", "data"),
                  prevent_initial_call=True)
    def open_node(click: dict[str, Any] | None, rng: str | None,
                  held: dict[str, Any] | None) -> str:
        points = (click or {}).get("points") or []
        if not points or not points[0].get("y"):
            raise dash.exceptions.PreventUpdate
        return clicked_href(points[0]["y"], held, rng)

    @app.callback(Output("url", "search", allow_duplicate=True),
                  Output("fleet-alerts-link", "href"),
                  Output(components.SHOWN, "data", allow_duplicate=True),
                  Input("fleet-range", "value"),
                  Input(components.cluster_picker_id("fleet"), "value"),
                  State("url", "search"), State("url", "pathname"), prevent_initial_call=True)
    def link(rng: str, cluster: str | None, search: str | None, path: str | None
             ) -> tuple[Any, ...]:
        if not timerange.new_search(search, DEFAULT_RANGE, rng, cluster):
            raise dash.exceptions.PreventUpdate
        search = timerange.Query(rng, cluster=cluster or None).search()
        return search, alerts_href(rng, cluster), components.address(path, search)
