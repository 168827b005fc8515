"""The job page's figures and table (``job``): a metric over the range with a line per GPU
of the job, those with an active alert in red, and each GPU's medians against the job's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from dash import dcc, html

from fleetwatch.catalogue import catalogue
from fleetwatch.dashboards import figures, theme
from fleetwatch.dashboards.components import node_href
from fleetwatch.dashboards.job_data import STAT_METRICS, GpuKey, GpuStat, Job
from fleetwatch.pipeline.store.base import ACTIVE_STATES, Alert

SHORT = {"gpu_sm_clock_mhz": "SM clock", "gpu_power_w": "Power", "gpu_temp_c": "Temp"}


def job_figure(metric: str, title: str, lines: Mapping[GpuKey, list[tuple[int, float]]],
               start_ms: int, end_ms: int, alerts: Sequence[Alert], primary: bool,
               height: int = 220) -> go.Figure:
    """One metric over the range, a line per GPU of the job ("node · GPU n"); GPUs with an
    active alert in red, as on the node page."""
    if not lines:
        return figures.empty_figure(f"No {title.lower()} from the job's GPUs in this range",
                                    height)
    hot = {(a.node, a.device) for a in alerts if a.state in ACTIVE_STATES}
    fig = go.Figure()
    for i, ((node, gpu), values) in enumerate(sorted(lines.items())):
        red = (node, f"gpu{gpu}") in hot
        xs, ys = figures.with_gaps(values)
        name = f"{node} · GPU {gpu}"
        fig.add_trace(go.Scatter(
            x=[figures.utc(ts) for ts in xs], y=ys, mode="lines", connectgaps=False,
            name=name, line={"width": 3 if red else 1.5, "color": theme.FIRING if red else
                             theme.GPU_COLOURS[i % len(theme.GPU_COLOURS)]},
            # The node's name as data (meta), never in the template: plotly would read a
            # "%{...}" in it as a field of its own.
            meta=figures.esc(name),
            hovertemplate=f"%{{meta}}  %{{y:.1f}} {figures.unit(metric)}<extra></extra>"))
    figures._base_layout(fig, height)
    fig.update_layout(margin={"l": 64, "r": 16, "t": 12, "b": 32}, hovermode="x unified",
                      showlegend=primary and len(lines) <= 32,
                      legend={"font": {"size": 11, "color": theme.MUTED},
                              "bgcolor": "rgba(0,0,0,0)"})
    fig.update_xaxes(autorange=True, autorangeoptions={
        "include": [figures.utc(start_ms), figures.utc(end_ms)]},
        gridcolor=theme.GRID, tickfont={"color": theme.MUTED}, title=None)
    fig.update_yaxes(title={"text": f"{title} ({figures.unit(metric)})", "font": {"size": 12}},
                     gridcolor=theme.GRID, zeroline=False, tickfont={"color": theme.MUTED})
    return fig


def _cell(metric: str, stat: GpuStat) -> html.Td:
    value, off = stat.medians[metric], stat.off[metric]
    if value is None:
        return html.Td("—", className="num")
    text = figures.fmt(metric, value, 1 if catalogue()[metric].unit == "ratio" else 0)
    diff = f" ({off:+.0%})" if off is not None and round(off * 100) else ""
    return html.Td(text + diff, className="num")


def gpu_table(job: Job, medians: Mapping[str, float | None], stats: Sequence[GpuStat],
              rng: str | None) -> html.Div:
    """Each GPU's median against the job's, the GPU furthest off first; a GPU links to
    its node page."""
    if not stats:
        return html.Div("No GPU of the job reported in this range", className="empty-note",
                        id="job-gpu-table-empty")
    head = html.Tr([html.Th("GPU")] + [html.Th(SHORT[m]) for m in STAT_METRICS])
    job_row = html.Tr(className="job-median-row", children=[html.Td("job median")] + [
        html.Td(figures.fmt(m, medians[m]) if medians[m] is not None else "—", className="num")
        for m in STAT_METRICS])
    rows = [html.Tr(className="job-gpu-row", **{"data-node": s.node, "data-gpu": str(s.gpu)},
                    children=[html.Td(dcc.Link(f"{s.node} · GPU {s.gpu}",
                                               href=node_href(s.node, s.gpu, rng),
                                               className="row-link node-link"))]
                    + [_cell(m, s) for m in STAT_METRICS]) for s in stats]
    return html.Div(html.Table([html.Thead(head), html.Tbody([job_row, *rows])],
                               className="alerts"), id="job-gpu-table", className="alerts-wrap")
