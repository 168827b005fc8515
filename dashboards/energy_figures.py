"""Figures of the energy and utilization pages: records in, plotly figures out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

import numpy as np
import plotly.graph_objects as go

from fleetwatch.dashboards import theme
from fleetwatch.dashboards.energy_data import Share
from fleetwatch.dashboards.figures import empty_figure, esc

CLUSTER_COLOURS = ("#56b4e9", "#009e73", "#cc79a7", "#7aa2f7", "#9ece6a", "#bb9af7",
                   "#2ac3de", "#80b1d3")
NO_ENERGY = "No energy in this range yet: the processor writes it as frames arrive"


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc).replace(tzinfo=None)


def _layout(fig: go.Figure, height: int, y_title: str) -> go.Figure:
    fig.update_layout(
        height=height, paper_bgcolor=theme.PANEL, plot_bgcolor=theme.PANEL,
        font={"family": theme.FONT, "color": theme.TEXT, "size": 13},
        margin={"l": 70, "r": 20, "t": 10, "b": 40}, barmode="stack",
        legend={"orientation": "h", "y": 1.12, "x": 0},
        hoverlabel={"bgcolor": theme.BG, "bordercolor": theme.GRID})
    fig.update_xaxes(gridcolor=theme.GRID, zeroline=False)
    fig.update_yaxes(gridcolor=theme.GRID, zeroline=False, title=y_title)
    return fig


def span_label(start: int, step: int) -> str:
    """A bin as its hover says it: "16:00–17:00 UTC", or the day "26 Nov UTC"."""
    if step >= 86400:
        return f"{_utc(start):%d %b} UTC"
    return f"{_utc(start):%H:%M}–{_utc(start + step):%H:%M} UTC"


def per_hour(hours: Sequence[int], series: Mapping[str, list[float]], y_title: str,
             height: int = 260, step: int = 3600) -> go.Figure:
    """Stacked bars per ``step`` (an hour, or a day for long ranges), one colour per cluster.

    Each bar is as wide as its bin and the axis spans the bins: with one hour of data,
    plotly would otherwise fill the chart with one bar over sub-millisecond ticks."""
    if not hours:
        return empty_figure(NO_ENERGY, height)
    fig = go.Figure()
    x = [_utc(h + step / 2) for h in hours]  # the middle of each bin, the bar over all of it
    spans = [span_label(h, step) for h in hours]
    for i, (name, ys) in enumerate(sorted(series.items())):
        fig.add_bar(x=x, y=ys, name=name, marker_color=CLUSTER_COLOURS[i % len(CLUSTER_COLOURS)],
                    width=step * 1000 * 0.9, customdata=spans, meta=esc(name),  # data, not template
                    hovertemplate=f"%{{meta}}: %{{y:.2f}} {y_title}<extra>%{{customdata}}</extra>")
    _layout(fig, height, y_title)
    fig.update_xaxes(type="date", range=[_utc(min(hours)), _utc(max(hours) + step)])
    return fig


def idle_share(hours: Sequence[int], shares: Mapping[str, Sequence[float | None]],
               height: int = 220, missing: Mapping[str, Sequence[float]] | None = None,
               missing_h: Mapping[str, Sequence[float]] | None = None) -> go.Figure:
    """The share of GPU time spent idle, per hour (one line per series), each hour's value at
    its middle and the axis over the whole hours: one hour is a point over that hour, not an
    empty chart over sub-millisecond ticks (a line of one point draws nothing).

    An hour without data (None) is a gap: unknown is not busy. ``missing`` (the share of each
    hour's GPU time without data) and ``missing_h`` (those GPU-hours), where any, are drawn
    as a shaded "no data" bar under each series and said in its hover."""
    if not hours:
        return empty_figure(NO_ENERGY, height)
    fig = go.Figure()
    x = [_utc(h + 1800) for h in hours]
    for i, (name, ys) in enumerate(sorted(shares.items())):
        colour = CLUSTER_COLOURS[i % len(CLUSTER_COLOURS)]
        gone = list((missing or {}).get(name, ())) or [0.0] * len(hours)
        gone_h = list((missing_h or {}).get(name, ())) or [0.0] * len(hours)
        fig.add_scatter(x=x, y=[None if y is None else 100 * y for y in ys], name=name,
                        mode="lines+markers" if len(hours) == 1 else "lines",
                        line={"color": colour, "width": 2}, marker={"size": 8},
                        customdata=[[100 * m, h] for m, h in zip(gone, gone_h)], meta=esc(name),
                        hovertemplate=("%{meta}: %{y:.1f}% idle · %{customdata[0]:.0f}% "
                                       "of GPU time without data (%{customdata[1]:.2g} GPU-h)"
                                       "<extra>%{x}</extra>"))
        if any(gone):  # a shaded bar over each hour with time missing, none elsewhere
            fig.add_bar(x=x, y=[100 * m for m in gone], name=f"{name}: no data",
                        marker={"color": theme.MUTED, "opacity": 0.35},
                        width=3600 * 1000 * 0.9, customdata=gone_h, meta=esc(name),
                        hovertemplate=("%{meta}: %{y:.0f}% of GPU time without data "
                                       "(%{customdata:.2g} GPU-h): unknown, not idle or "
                                       "busy<extra>%{x}</extra>"))
    _layout(fig, height, "% of GPU time")
    fig.update_xaxes(type="date", range=[_utc(min(hours)), _utc(max(hours) + 3600)])
    fig.update_yaxes(rangemode="tozero")
    return fig


def share_label(s: Share, with_cluster: bool) -> str:
    """A bar's name: a job's with its cluster where several show (job 777 of c-east and of
    c-west are two jobs, and a category axis would draw them as one bar)."""
    return f"{s.name} ({s.cluster})" if with_cluster and s.cluster else s.name


def top_shares(items: Sequence[Share], label: str, height: int = 380,
               with_cluster: bool = False) -> go.Figure:
    """Horizontal bars of kWh (biggest on top), amber where idle over half its GPU time;
    the idle share of GPU time, the idle energy and CO2e in the hover."""
    if not items:
        return empty_figure(NO_ENERGY, height)
    rows = list(items)[::-1]
    fig = go.Figure(go.Bar(
        y=[share_label(s, with_cluster) for s in rows], x=[s.kwh for s in rows],
        orientation="h",
        marker_color=[theme.PENDING if s.idle_time_share > 0.5 else "#56b4e9" for s in rows],
        customdata=[[s.co2e_kg, 100 * s.idle_time_share, s.gpu_hours,
                     100 * s.idle_energy_share] for s in rows],
        hovertemplate=(f"{label} %{{y}}: %{{x:.1f}} kWh, %{{customdata[0]:.1f}} kg CO2e, "
                       "%{customdata[2]:.0f} GPU-h, %{customdata[1]:.0f}% of GPU time idle "
                       "(idle energy %{customdata[3]:.0f}% of GPU kWh)<extra></extra>")))
    _layout(fig, height, "")
    fig.update_xaxes(title="kWh (amber: idle over half its GPU time)")
    fig.update_yaxes(type="category", automargin=True, dtick=1)
    return fig


def cdf(samples: Mapping[str, np.ndarray], x_title: str, height: int = 240,
        scale: float = 1.0, empty: str = "No samples in this range") -> go.Figure:
    """Empirical CDFs, one line per group, as the Acme study drew them; ``empty``: what
    the figure says when there is nothing to draw."""
    groups = {k: v for k, v in samples.items() if len(v)}
    if not groups:
        return empty_figure(empty, height)
    fig = go.Figure()
    for i, (name, values) in enumerate(sorted(groups.items())):
        xs = np.sort(values) * scale
        if len(xs) > 2000:  # the shape needs no more points than the screen has
            xs = xs[np.linspace(0, len(xs) - 1, 2000).astype(int)]
        ys = np.linspace(0, 1, len(xs))
        fig.add_scatter(x=xs, y=ys, mode="lines", name=f"{name} ({len(values):,})",
                        line={"color": CLUSTER_COLOURS[i % len(CLUSTER_COLOURS)], "width": 2},
                        hovertemplate="%{x:.3g}: %{y:.0%} of samples at or below<extra></extra>")
    _layout(fig, height, "share of samples")
    fig.update_xaxes(title=x_title)
    fig.update_yaxes(range=[0, 1], tickformat=".0%")
    return fig
