"""Figures and the table of the facility page: records in, plotly figures and html out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

import plotly.graph_objects as go
from dash import html

from fleetwatch import amounts
from fleetwatch.dashboards import theme
from fleetwatch.dashboards.energy_figures import CLUSTER_COLOURS
from fleetwatch.dashboards.facility_data import FacilityView, RackLine
from fleetwatch.dashboards.figures import empty_figure, esc
from fleetwatch.pipeline.store.rack_series import RackSeries

NO_DATA = "No data yet: no rack has reported in this range"


def _utc(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).replace(tzinfo=None)


def rack_name(cluster: str, rack: str, many: bool) -> str:
    """A rack as the page names it: with its cluster where several show (rack names repeat)."""
    return f"{cluster}/{rack}" if many and cluster else rack or "(no rack)"


def rack_lines(series: RackSeries, y_title: str, room: Mapping[str, Sequence[float | None]]
               | None = None, height: int = 300, empty: str = NO_DATA) -> go.Figure:
    """One line per rack (the mean of each bin at its middle; a bin without data a gap),
    and the room's (dashed, per cluster) where given."""
    if not series.means:
        return empty_figure(empty, height)
    many = len({c for c, _ in series.means}) > 1
    x = [_utc(series.start_ms + (i + 0.5) * series.step_ms) for i in range(series.bins)]
    fig = go.Figure()
    for i, ((cluster, rack), ys) in enumerate(series.means.items()):
        fig.add_scatter(x=x, y=list(ys), name=rack_name(cluster, rack, many),
                        mode="lines+markers" if series.bins <= 2 else "lines",
                        line={"color": CLUSTER_COLOURS[i % len(CLUSTER_COLOURS)], "width": 2},
                        meta=esc(rack_name(cluster, rack, many)),
                        hovertemplate=f"%{{meta}}: %{{y:.1f}} {y_title}<extra>%{{x}}</extra>")
    for cluster, ys in (room or {}).items():
        name = f"room ({cluster})" if many else "room (median of racks)"
        fig.add_scatter(x=x, y=list(ys), name=name, mode="lines", meta=esc(name),
                        line={"color": theme.TEXT, "width": 2, "dash": "dash"},
                        hovertemplate=f"%{{meta}}: %{{y:.1f}} {y_title}<extra>%{{x}}</extra>")
    fig.update_layout(
        height=height, paper_bgcolor=theme.PANEL, plot_bgcolor=theme.PANEL,
        font={"family": theme.FONT, "color": theme.TEXT, "size": 13},
        margin={"l": 70, "r": 20, "t": 10, "b": 40},
        legend={"orientation": "h", "y": 1.15, "x": 0},
        hoverlabel={"bgcolor": theme.BG, "bordercolor": theme.GRID})
    fig.update_xaxes(gridcolor=theme.GRID, zeroline=False, type="date",
                     range=[_utc(series.start_ms),
                            _utc(series.start_ms + series.bins * series.step_ms)])
    fig.update_yaxes(gridcolor=theme.GRID, zeroline=False, title=y_title)
    return fig


def _kwh(kwh: float) -> str:
    """kWh, or "n/a" where the carbon settings were refused (the PUE unknown: NaN)."""
    return "n/a" if math.isnan(kwh) else f"{kwh:,.2f} kWh"


def _cell(value: str, cls: str) -> html.Td:
    return html.Td(value, className=f"num {cls}")


def _row(r: RackLine, many: bool) -> html.Tr:
    temp = "–"  # no inlet sensor (BMC) or no GPU temperature in the range
    return html.Tr(className="rack-row", id=f"rack-{r.cluster}-{r.rack}", children=[
        html.Td(rack_name(r.cluster, r.rack, many), className="rack-name"),
        _cell("no data now" if r.power_w is None else f"{r.power_w / 1000:,.2f} kW",
              "rack-power"),
        _cell(str(r.gpus_now), "rack-gpus"),
        _cell(_kwh(r.kwh), "rack-kwh"), _cell(_kwh(r.facility_kwh), "rack-facility"),
        _cell(temp if r.inlet_c is None else f"{r.inlet_c:.1f} °C", "rack-inlet"),
        _cell(temp if r.die_c is None else f"{r.die_c:.1f} °C", "rack-die")])


def rack_table(v: FacilityView) -> html.Div | html.Table:
    """Per rack: IT power now, its GPUs reporting, IT and facility kWh in range, and the
    newest inlet and die temperatures; the totals last."""
    if v.empty:
        return html.Div(NO_DATA, className="empty-note", id="facility-racks-empty")
    many = len(v.seen) > 1
    head = html.Tr([html.Th(h) for h in (
        "Rack", "IT power now", "GPUs now", "IT energy in range", "Facility energy (x PUE)",
        "Inlet air", "GPU die (mean)")])
    power = [r.power_w for r in v.racks if r.power_w is not None]
    total = html.Tr(className="rack-total", children=[
        html.Td("All racks shown"),
        _cell(f"{sum(power) / 1000:,.2f} kW" if power else "no data now", "rack-power"),
        _cell(str(sum(r.gpus_now for r in v.racks)), "rack-gpus"),
        _cell(_kwh(sum(r.kwh for r in v.racks)), "rack-kwh"),
        _cell(_kwh(sum(r.facility_kwh for r in v.racks)), "rack-facility"),
        html.Td(""), html.Td("")])
    return html.Table([html.Thead(head),
                       html.Tbody([_row(r, many) for r in v.racks] + [total])],
                      className="alerts", id="facility-rack-table")


def power_note(v: FacilityView) -> str:
    """What "IT power now" adds up, said under the table."""
    static = (f" plus energy.node_static_w ({amounts.sig(v.static_w)} W) per node reporting "
              f"({v.nodes_now} now: the rest of the node, as the energy ledger books it)"
              if v.static_w else
              "; energy.node_static_w is 0, so the rest of the node (fans, NICs, disks) is "
              "in neither")
    hours = f"{v.hours} whole hour{'s' if v.hours != 1 else ''}"
    return (f"IT power now: the newest GPU board power and CPU package (RAPL) power of the "
            f"rack's nodes, samples under 5 min old{static}. Energy: the ledger's IT energy "
            f"(GPUs, CPUs, rest of node), integrated once by the processor, over the {hours} "
            f"the range touches (UTC); facility energy is IT x each hour's PUE (carbon.pue, "
            f"carbon.pue_csv, carbon.clusters), as on the energy page.")
