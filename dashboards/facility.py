"""The facility page (``/facility?range=6h&cluster=c1``): for whoever runs the hall (CRACs,
PDUs, rack power), per rack: IT power now, IT and facility energy over the range, and the
rack's inlet air over time beside its GPUs' mean die temperature, with the room's air, so a
cooler that fails shows as one rack's inlet and dies rising while the room stays put."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from fleetwatch.carbon import CarbonModel
from fleetwatch.dashboards import components, facility_figures, figures, live, timerange
from fleetwatch.dashboards.energy_figures import empty_figure
from fleetwatch.dashboards.facility_data import read_facility
from fleetwatch.pipeline.store.base import StoreError

PATH = "/facility"
DEFAULT_RANGE = "6h"
_GRAPH = {"displayModeBar": False}
GRAPHS = ["facility-inlet", "facility-die"]


def _panel(title: str, hint: str, body: Any) -> html.Section:
    return html.Section(className="panel", children=[
        html.Div(className="panel-head", children=[html.H2(title),
                                                   html.Span(hint, className="panel-hint")]),
        body])


def layout(refresh_s: float, search: str | None = None) -> html.Div:
    q = timerange.parse(search, DEFAULT_RANGE)
    return html.Div(className="page", children=[
        dcc.Interval(id="facility-tick", interval=int(max(refresh_s, 15.0) * 1000)),
        dcc.Store(id=components.zoom_store("facility")),
        dcc.Store(id="facility-drawn"),  # whether a read has drawn the panels yet
        html.Div(className="page-head", children=[
            html.H1("Facility"), components.cluster_picker("facility", q.cluster),
            timerange.picker("facility", q.range),
            html.Div(id="facility-updated", className="updated")]),
        *live.parts("facility"),  # the banner while the dashboard is away
        html.Div(id="facility-notice"),
        _panel("Racks", "IT power now · energy in range · newest temperatures",
               html.Div(id="facility-racks",
                        children=html.Div("Loading…", className="empty-note"))),
        html.Div(id="facility-power-note", className="panel-hint method-note"),
        _panel("Inlet air per rack", "°C · mean of the rack's nodes' inlet sensors (BMC) · "
               "dashed: the room, the median of the racks · UTC · on SQLite, a bin over "
               "5 min is the mean of 5 of its minutes",
               dcc.Graph(id="facility-inlet", figure=empty_figure("Loading…", 300),
                         config=_GRAPH)),
        _panel("GPU die temperature per rack", "°C · mean of the rack's GPUs · UTC",
               dcc.Graph(id="facility-die", figure=empty_figure("Loading…", 300),
                         config=_GRAPH)),
    ])


def register(app: dash.Dash, store: Any, clock: Callable[[], float], carbon: CarbonModel,
             static_w: float = 0.0) -> None:
    """The page's callback; ``static_w``: energy.node_static_w, in each node's power now."""
    @app.callback(Output("facility-racks", "children"), Output("facility-inlet", "figure"),
                  Output("facility-die", "figure"), Output("facility-power-note", "children"),
                  Output("facility-notice", "children"), Output("facility-updated", "children"),
                  Output("facility-drawn", "data"),
                  Output(components.cluster_picker_id("facility"), "options"),
                  Input("facility-tick", "n_intervals"), Input("facility-range", "value"),
                  Input(components.cluster_picker_id("facility"), "value"),
                  State(components.zoom_store("facility"), "data"),
                  State("facility-drawn", "data"),
                  running=[(Output("facility-tick", "disabled"), True, False)])  # see fleet.py
    def refresh(_n: int | None, rng: str, cluster: str | None, zoom: dict[str, Any] | None,
                drawn: bool | None) -> tuple[Any, ...]:
        now = clock()
        start, end = timerange.window(rng, now)
        try:
            v = read_facility(store, carbon, start, end, now, cluster or None, static_w)
        except StoreError as exc:
            text = f"Store unavailable: {exc}"
            kept: list[Any] = [dash.no_update] * 4 if drawn else [
                html.Div("No racks: the store does not answer", className="empty-note",
                         id="facility-racks-empty"),
                empty_figure(text, 300), empty_figure(text, 300), ""]
            return (*kept, components.notice(text), components.failed_stamp(now),
                    dash.no_update, dash.no_update)
        figs = [facility_figures.rack_lines(v.inlet, "°C", v.room,
                                            empty="No inlet air sensors reported in this "
                                                  "range yet" if not v.empty else
                                            facility_figures.NO_DATA),
                facility_figures.rack_lines(v.die, "°C")]
        for graph, fig in zip(GRAPHS, figs):  # the user's zoom kept; a new range starts clean
            fig.update_layout(uirevision=rng)
            figures.hold_zoom(fig, components.zoomed(zoom, rng, graph))
        notice = components.notice(facility_figures.NO_DATA, "facility-empty") if v.empty \
            else None
        return (facility_figures.rack_table(v), *figs, facility_figures.power_note(v), notice,
                components.updated_stamp(now), True,
                components.cluster_options(v.seen, cluster or None))

    components.link_range(app, "facility-range", DEFAULT_RANGE,
                          components.cluster_picker_id("facility"))
    components.keep_zoom(app, "facility", GRAPHS, "facility-range")
