"""The energy and carbon page (``/energy?range=7d&cluster=c1``): kWh and CO2e over time by
cluster, the top jobs and users, today, this month and the month's projection, the idle
share; of every cluster, or of the one picked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from fleetwatch import amounts
from fleetwatch.carbon import CarbonModel
from fleetwatch.dashboards import components, energy_figures, figures, live, timerange
from fleetwatch.dashboards.energy_data import EnergyView, read_energy, rebin, series_warning
from fleetwatch.pipeline.store.base import StoreError

PATH = "/energy"
DEFAULT_RANGE = "7d"
_GRAPH = {"displayModeBar": False}


def _tile(tile_id: str, label: str, value: str, detail: str = "", tone: str = "") -> html.Div:
    return html.Div(className=f"tile {tone}".strip(), id=tile_id, children=[
        html.Div(label, className="tile-label"), html.Div(value, className="tile-value"),
        html.Div(detail, className="tile-detail")])


def _panel(title: str, hint: str, graph_id: str) -> html.Section:
    return html.Section(className="panel", children=[
        html.Div(className="panel-head", children=[html.H2(title),
                                                   html.Span(hint, className="panel-hint")]),
        dcc.Graph(id=graph_id, figure=energy_figures.empty_figure("Loading…", 240),
                  config=_GRAPH)])


Render = Callable[..., tuple[Any, ...]]


def layout(refresh_s: float, search: str | None = None, render: Render | None = None
           ) -> html.Div:
    """The page; with ``render`` (what ``register`` returns) it arrives drawn, saving the
    browser a round trip, and the callback runs only on a tick or a new range."""
    q = timerange.parse(search, DEFAULT_RANGE)
    page = html.Div(className="page", children=[
        dcc.Interval(id="energy-tick", interval=int(max(refresh_s, 30.0) * 1000)),
        dcc.Store(id=components.zoom_store("energy")),
        html.Div(className="page-head", children=[
            html.H1("Energy & carbon"), components.cluster_picker("energy", q.cluster),
            timerange.picker("energy", q.range),
            html.Div(id="energy-updated", className="updated")]),
        *live.parts("energy"),  # the banner while the dashboard is away
        html.Div(id="energy-notice"),
        html.Div(id="energy-summary", className="summary summary-6"),
        _panel("Energy", "IT kWh (GPUs, CPUs, rest of node) · by cluster · per hour "
               "(per day past 4 days of data) · UTC", "energy-kwh"),
        _panel("Carbon", "kg CO2e = kWh x PUE x grid intensity (location-based)",
               "energy-co2e"),
        html.Div(className="node-grid two", children=[
            _panel("Top jobs", "kWh in range", "energy-jobs"),
            _panel("Top users", "kWh in range", "energy-users")]),
        _panel("Idle GPU time", "share of GPU time with SM activity under the idle threshold",
               "energy-idle"),
        html.Div(id="energy-method", className="panel-hint method-note"),
    ])
    if render is not None:
        _fill(page, render(q.range, cluster=q.cluster))
    return page


GRAPHS = ["energy-kwh", "energy-co2e", "energy-jobs", "energy-users", "energy-idle"]
_OUTPUTS = (("energy-summary", "children"), ("energy-kwh", "figure"),
            ("energy-co2e", "figure"), ("energy-jobs", "figure"), ("energy-users", "figure"),
            ("energy-idle", "figure"), ("energy-notice", "children"),
            ("energy-updated", "children"), ("energy-method", "children"),
            (components.cluster_picker_id("energy"), "options"))


def _fill(page: Any, values: tuple[Any, ...]) -> None:
    """Set the rendered values on the layout's components, by id."""
    wanted = {cid: (prop, v) for (cid, prop), v in zip(_OUTPUTS, values)
              if v is not dash.no_update}

    def walk(node: Any) -> None:
        cid = getattr(node, "id", None)
        if cid in wanted:
            prop, value = wanted[cid]
            setattr(node, prop, value)
        children = getattr(node, "children", None)
        for child in children if isinstance(children, list) else [children]:
            if hasattr(child, "to_plotly_json"):
                walk(child)

    walk(page)


def summary(v: EnergyView, currency_note: str = "") -> list[html.Div]:
    idle = v.idle_kwh / v.gpu_kwh if v.gpu_kwh else 0.0
    # The ledger keeps hours: a range is read as the whole hours it touches, and says so.
    hours = f" · {len(v.hours)} whole hour{'s' if len(v.hours) != 1 else ''}" if v.hours else ""
    return [
        _tile("energy-today", "Today", "no data", f"no node has reported since 00:00 {v.tz}")
        if v.today_kwh is None or v.today_co2e_kg is None else
        _tile("energy-today", "Today", f"{amounts.energy(v.today_kwh)} IT",
              f"{_facility(v.today_facility_kwh)} · {amounts.mass(v.today_co2e_kg)} since "
              f"00:00 {v.tz}"),
        _tile("energy-month", "This month", "no data", "nothing in the ledger this month")
        if v.month_kwh is None or v.month_co2e_kg is None else
        _tile("energy-month", "This month", amounts.mass(v.month_co2e_kg),
              f"{amounts.energy(v.month_kwh)} IT · {_facility(v.month_facility_kwh)}"),
        _tile("energy-projection", "Month projection",
              "withheld" if v.month_co2e_kg is not None else "no data",
              v.projection_withheld, "warn" if v.month_co2e_kg is not None else "")
        if v.month_projection_kg is None else
        _tile("energy-projection", "Month projection", amounts.mass(v.month_projection_kg),
              "at the rate of the hours with data"),
        _tile("energy-inrange", "In range", f"{amounts.energy(v.kwh)} IT",
              f"{_facility(v.facility_kwh)} · {amounts.mass(v.co2e_kg)}{hours}"),
        _tile("energy-idle-share", "Idle GPU energy", f"{idle:.1%}",
              f"{amounts.energy(v.idle_kwh)} on GPUs doing no work",
              "warn" if idle > 0.1 else ""),
        _tile("energy-quality", "Above TDP · missing",
              f"{amounts.sig(v.over_tdp_gpu_hours)} · {amounts.sig(v.missing_gpu_hours)}",
              "GPU-hours above TDP · GPU-hours without data" + (
                  f" · {v.silent}" if v.silent else ""),
              "warn" if v.missing_gpu_hours > 0 or v.silent else ""),
    ]


def _facility(kwh: float | None) -> str:
    """Facility kWh (IT x PUE), the figure a facility meter compares with."""
    return "facility n/a" if kwh is None else f"{amounts.energy(kwh)} facility (x PUE)"


def method_note(carbon: CarbonModel) -> str:
    """The method under the charts: the formula, the grid and PUE, and each cluster's own
    (carbon.clusters), which prices every figure of that cluster's energy."""
    return " ".join(carbon.method()[:3 + len(carbon.clusters)])


def register(app: dash.Dash, store: Any, clock: Callable[[], float],
             carbon: CarbonModel, max_gap_s: float = 60.0) -> Render:
    """The page's callbacks; returns the renderer that ``layout`` takes. ``max_gap_s``
    (energy.max_gap_s): a node without a frame for longer is named as silent."""
    @app.callback(*(Output(cid, prop) for cid, prop in _OUTPUTS),
                  Input("energy-tick", "n_intervals"), Input("energy-range", "value"),
                  Input(components.cluster_picker_id("energy"), "value"),
                  State(components.zoom_store("energy"), "data"), prevent_initial_call=True,
                  running=[(Output("energy-tick", "disabled"), True, False)])  # see fleet.py
    def refresh(_n: int | None, rng: str, cluster: str | None, zoom: dict[str, Any] | None
                ) -> tuple[Any, ...]:
        return render(rng, zoom, first=False, cluster=cluster or None)

    def render(rng: str, zoom: dict[str, Any] | None = None, first: bool = True,
               cluster: str | None = None) -> tuple[Any, ...]:
        """The page's values; ``first``: the page's first draw (the layout's), which has
        nothing of a read before to keep when the store does not answer; ``cluster``: of
        that cluster only."""
        now = clock()
        start, end = timerange.window(rng, now, carbon.timezone)
        try:
            v = read_energy(store, carbon, start, end + 3600, now, cluster=cluster,
                            max_gap_s=max_gap_s)
        except StoreError as exc:
            text = f"Store unavailable: {exc}"
            # The last read's figures stay under the banner; a first draw says why it is
            # empty instead of "Loading…" for as long as the store is away.
            kept = [dash.no_update] * 6 if not first else [
                [_tile("energy-nodata", "Energy", "no data", "the store does not answer")],
                *[energy_figures.empty_figure(text, h) for h in (260, 260, 380, 380, 220)]]
            return (*kept, components.notice(text), components.failed_stamp(now),
                    dash.no_update, dash.no_update)
        warning = series_warning(carbon, v.hours, v.priced)
        notice = (components.notice(f"CO2e unknown: {carbon.problem}", "energy-carbon-refused")
                  if carbon.problem
                  else components.notice(energy_figures.NO_ENERGY, "energy-empty") if not v.hours
                  else components.notice(f"Warning: {warning}", "energy-series-warning")
                  if warning else None)
        step = 86400 if len(v.hours) > 4 * 24 else 3600  # by the data, not the range
        bins, kwh = rebin(v.hours, v.by_cluster, step)
        _, co2e = rebin(v.hours, v.co2e_by_cluster, step)
        unit = "hour" if step == 3600 else "day"
        figs = [energy_figures.per_hour(bins, kwh, f"kWh per {unit}", step=step),
                energy_figures.per_hour(bins, co2e, f"kg CO2e per {unit}", step=step),
                energy_figures.top_shares(v.jobs, "job",
                                          with_cluster=cluster is None and len(v.seen) > 1),
                energy_figures.top_shares(v.users, "user"),
                energy_figures.idle_share(v.idle.hours, v.idle.idle, missing=v.idle.missing,
                                          missing_h=v.idle.missing_h)]
        for graph, fig in zip(GRAPHS, figs):  # the user's zoom kept; a new range starts clean
            fig.update_layout(uirevision=rng)
            figures.hold_zoom(fig, components.zoomed(zoom, rng, graph))
        return (summary(v), *figs,
                notice, components.updated_stamp(now), method_note(carbon),
                components.cluster_options(v.seen, cluster))

    components.link_range(app, "energy-range", DEFAULT_RANGE,
                          components.cluster_picker_id("energy"))
    components.keep_zoom(app, "energy", GRAPHS, "energy-range")

    return render
