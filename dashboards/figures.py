"""Pure figure builders: records in, a plotly figure out. No store, no Dash, no clock.

Units and metric descriptions come from the catalogue, so an axis never
disagrees with what the collector measured.
"""

from __future__ import annotations

import html
import re
import textwrap
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import plotly.graph_objects as go

from fleetwatch.catalogue import catalogue
from fleetwatch.dashboards import theme
from fleetwatch.dashboards.data import STALE_S, TEMP, GpuCell, GpuKey, GpuSeries, node_label
from fleetwatch.pipeline.store.base import ACTIVE_STATES, Alert, Annotation, gpu_index

# The catalogue writes units as they appear in metric names (``_c``); a screen
# shows the symbol people read.
_UNIT_SYMBOLS = {"C": "°C"}
# Heatmap rows: 52 px each up to about 40 nodes; past that they shrink to fit
# _HEATMAP_PX, but never below _MIN_ROW_PX (a row stays hoverable and its label legible).
_ROW_PX, _MIN_ROW_PX, _HEATMAP_PX = 52, 16, 2200
_TEXT_MIN_ROW_PX = 30  # below this, a cell's value (15 px text) is left to the hover
WRAP_CHARS = 70  # a line of an empty figure's sentence: plotly does not wrap text itself
NO_DATA = (f"No data yet: no GPU has reported in the last {STALE_S / 60:g} minutes "
           "(collectors starting, or stopped)")


def esc(text: str) -> str:
    """Text from agents (node, rack, job names, alert messages) for plotly's labels,
    which read ``<b>``, ``<br>``, ``<a href>`` and entities as markup. Quotes stay: with
    ``<`` escaped no tag (nor attribute) can open, and plotly would show ``&quot;``."""
    return html.escape(text, quote=False)


def node_from_label(label: str) -> str:
    """The node name behind a heatmap row label (``esc`` undone)."""
    return html.unescape(label)


def place_from_label(label: str, clusters: Sequence[str], many: bool
                     ) -> tuple[str | None, str]:
    """(cluster, node) behind a heatmap row label: ``cluster/node`` where the heatmap showed
    ``many`` clusters (the longest cluster that prefixes it, so a ``/`` in a name is kept),
    else the node alone, in the one cluster shown (None if not known)."""
    text = node_from_label(label)
    if many:
        for c in sorted(clusters, key=len, reverse=True):
            if text.startswith(f"{c}/"):
                return c, text[len(c) + 1:]
    return (clusters[0] if len(clusters) == 1 else None), text


def unit(metric: str) -> str:
    raw = catalogue()[metric].unit
    return _UNIT_SYMBOLS.get(raw, raw)


def fmt(metric: str, value: float | None, digits: int = 0) -> str:
    """A value with its catalogue unit; an unknown value is "n/a", never 0."""
    if value is None:
        return "n/a"
    sep = "" if unit(metric) in ("%", "°C") else " "
    return f"{value:.{digits}f}{sep}{unit(metric)}"


def utc(ts_ms: float) -> datetime:
    # Naive UTC: plotly.js drops offsets anyway, and the axes say "UTC".
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).replace(tzinfo=None)


def _base_layout(fig: go.Figure, height: int) -> None:
    fig.update_layout(
        height=height, paper_bgcolor=theme.PANEL, plot_bgcolor=theme.PANEL,
        font={"family": theme.FONT, "color": theme.TEXT, "size": 13},
        margin={"l": 90, "r": 90, "t": 16, "b": 40},
        hoverlabel={"bgcolor": theme.BG, "bordercolor": theme.GRID,
                    "font": {"family": theme.FONT, "color": theme.TEXT}},
    )


def empty_figure(message: str = NO_DATA, height: int = 320) -> go.Figure:
    """A figure that says why it is empty instead of showing blank axes. ``message`` is plain
    text (a store's error may hold anything): escaped, and wrapped to lines that fit."""
    fig = go.Figure()
    _base_layout(fig, height)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    lines = textwrap.wrap(message, WRAP_CHARS, break_long_words=False,
                          break_on_hyphens=False) or [""]
    fig.add_annotation(text="<br>".join(map(esc, lines)), showarrow=False, xref="paper",
                       yref="paper", x=0.5, y=0.5, font={"size": 16, "color": theme.MUTED})
    return fig


def active_marks(alerts: Sequence[Alert]) -> dict[GpuKey, Alert]:
    """(cluster, node, gpu) -> the alert that marks that GPU; firing wins over pending."""
    marks: dict[GpuKey, Alert] = {}
    for a in alerts:
        index = gpu_index(a.device)
        if a.state not in ACTIVE_STATES or index is None:
            continue
        held = marks.get((a.cluster, a.node, index))
        if held is None or (held.state != "firing" and a.state == "firing"):
            marks[(a.cluster, a.node, index)] = a
    return marks


# A heatmap cell's tooltip: the row (node) and column (GPU) from the axes, the rest from
# the cell's customdata, in this order.
HOVER_FIELDS = ("rack", "temperature", "power", "utilization", "tail")
HEATMAP_HOVER = ("<b>%{y} · %{x}</b>  (%{customdata[0]})<br>temperature  %{customdata[1]}<br>"
                 "power  %{customdata[2]}<br>utilization  %{customdata[3]}<br>"
                 "%{customdata[4]}<extra></extra>")


def hover_text(trace: Any, i: int, j: int) -> str:
    """The tooltip plotly shows for the heatmap cell at row ``i``, column ``j`` of ``trace``
    (``HEATMAP_HOVER`` filled in as plotly.js fills it), or "" for a cell with no reading."""
    data = trace.customdata[i][j]
    if data is None:
        return ""
    out = trace.hovertemplate.replace("%{y}", str(trace.y[i])).replace("%{x}", str(trace.x[j]))
    for k, value in enumerate(data):
        out = out.replace(f"%{{customdata[{k}]}}", str(value))
    return out.replace("<extra></extra>", "")


def fleet_heatmap(cells: Sequence[GpuCell], alerts: Sequence[Alert] = (),
                  jobs: Mapping[GpuKey, str] | None = None,
                  silent: Mapping[tuple[str, str], float] | None = None,
                  models: Mapping[GpuKey, str] | None = None) -> go.Figure:
    """GPU temperature: a row per node (grouped by cluster and rack), a column per GPU
    index. Rows are labelled ``cluster/node`` where the cells are of several clusters:
    node001 of two clusters is two machines, two rows.

    GPUs with an active alert get an outline in the alert's colour and a
    marker before their value. ``jobs`` overrides the cells' own job, for
    callers that know it from elsewhere; ``models`` names each GPU's part in its hover (a
    fleet of several parts on one colour scale). ``silent``: nodes declared silent ((cluster,
    node) -> since when): their row is covered and says so, its values being old.
    """
    if not cells:
        return empty_figure()
    # Bottom to top: plotly draws a heatmap's first row at the bottom, so the list is
    # reversed to put the first node on top. The order is in the data itself, not in
    # an axis setting (``autorange="reversed"``) that a kept uirevision could drop.
    rows = sorted({(c.cluster, c.rack, c.node) for c in cells}, key=_natural_row, reverse=True)
    many = len({c.cluster for c in cells}) > 1
    cols = sorted({c.gpu for c in cells})
    row_of = {(cluster, node): i for i, (cluster, _, node) in enumerate(rows)}
    col_of = {gpu: j for j, gpu in enumerate(cols)}
    marks = active_marks(alerts)
    px = row_px(len(rows))
    shows_text = px >= _TEXT_MIN_ROW_PX  # below, a cell's value would not fit: the hover has it
    z: list[list[float | None]] = [[None] * len(cols) for _ in rows]
    text = [[""] * len(cols) for _ in rows]
    hover: list[list[list[str] | None]] = [[None] * len(cols) for _ in rows]
    for c in cells:
        i, j = row_of[c.place], col_of[c.gpu]
        alert = marks.get((c.cluster, c.node, c.gpu))
        job = (jobs or {}).get((c.cluster, c.node, c.gpu), c.job)
        z[i][j] = c.temp_c
        text[i][j] = f"{'▲ ' if alert else ''}{c.temp_c:.0f}"
        # Only what differs from cell to cell travels per cell (HOVER_FIELDS); the rest is
        # in the trace's one template: 8,000 GPUs' tooltips were 1 MB of every refresh.
        # Names and texts come from agents: escaped, so plotly shows them as written
        # instead of reading them as its own markup.
        tail = f"<b>alert {alert.state}</b>: {esc(alert.message)}" if alert else "no active alert"
        if job:  # the store keeps metrics only; a job shows when a caller knows it
            tail = f"job  {esc(job)}<br>{tail}"
        part = (models or {}).get((c.cluster, c.node, c.gpu))
        where = f"{esc(c.rack)} · {esc(part.removeprefix('NVIDIA '))}" if part else esc(c.rack)
        hover[i][j] = [where, fmt(TEMP, c.temp_c), fmt('gpu_power_w', c.power_w),
                       fmt('gpu_util_pct', c.util_pct), tail]
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"GPU {g}" for g in cols],
        y=[esc(node_label(cluster, node, many)) for cluster, _, node in rows],
        text=text if shows_text else None, customdata=hover, textfont={"size": 15},
        texttemplate="%{text}" if shows_text else None,
        hovertemplate=HEATMAP_HOVER, xgap=3, ygap=3,
        colorscale=theme.TEMP_SCALE, zmin=theme.TEMP_MIN_C, zmax=theme.TEMP_MAX_C,
        colorbar={"title": {"text": unit(TEMP)}, "thickness": 12, "outlinewidth": 0,
                  "tickfont": {"color": theme.MUTED}},
    ))
    _base_layout(fig, height=max(260, 70 + px * len(rows)))
    fig.update_xaxes(side="top", showgrid=False, zeroline=False, tickfont={"color": theme.MUTED})
    fig.update_yaxes(autorange=True, showgrid=False, zeroline=False,
                     # A gap as a standoff, not a suffix: the tooltip's %{y} would carry it.
                     ticklabelstandoff=8,
                     tickfont={"size": 14 if px >= _TEXT_MIN_ROW_PX else 10})
    labels, shapes = _rack_labels(rows)
    for (cluster, node, gpu), alert in marks.items():
        if (cluster, node) in row_of and gpu in col_of:
            i, j = row_of[(cluster, node)], col_of[gpu]
            # White, not red: the cell under a firing alert is already red.
            colour = theme.TEXT if alert.state == "firing" else theme.PENDING
            shapes.append({"type": "rect", "x0": j - 0.5, "x1": j + 0.5, "y0": i - 0.5,
                           "y1": i + 0.5, "xref": "x", "yref": "y",
                           "line": {"color": colour, "width": 4 if px >= _TEXT_MIN_ROW_PX else 2},
                           "name": f"alert:{node}/gpu{gpu}:{alert.state}"})
    for (cluster, node), since in (silent or {}).items():
        if (cluster, node) in row_of:
            labels.append(_silent_row(row_of[(cluster, node)], since, len(cols)))
            shapes.append({"type": "rect", "x0": -0.5, "x1": len(cols) - 0.5,
                           "y0": row_of[(cluster, node)] - 0.5,
                           "y1": row_of[(cluster, node)] + 0.5, "xref": "x", "yref": "y",
                           "fillcolor": theme.PANEL, "opacity": 0.85, "line": {"width": 0},
                           "name": f"silent:{cluster}/{node}"})
    # Set once: each add_annotation/add_shape re-validates every one already there, which
    # made a 128-rack fleet's figure take tens of seconds (quadratic in the racks).
    fig.update_layout(margin={"l": 150, "r": 20, "t": 40, "b": 16},
                      annotations=labels, shapes=shapes)
    return fig


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """``name`` in the order people count: rack-2 < rack-10 < rack-100 (as strings,
    rack-10 < rack-100 < rack-11 broke a 128-rack room's physical order on the wall)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower())
                 for part in re.split(r"(\d+)", name) if part)


def _natural_row(row: tuple[str, str, str]) -> tuple[Any, ...]:
    """A heatmap row (cluster, rack, node) in natural order; as written on a tie (r01, r1)."""
    return (*(natural_key(part) for part in row), row)


def _silent_row(i: int, since: float, cols: int) -> dict[str, Any]:
    """The words over a silent node's covered row."""
    return {"text": f"silent since {utc(since * 1000).strftime('%H:%M:%S')} UTC",
            "xref": "x", "yref": "y", "x": (cols - 1) / 2, "y": i, "showarrow": False,
            "font": {"color": theme.PENDING, "size": 12}}


def row_px(rows: int) -> int:
    """Height of a heatmap row: 52 px while the fleet fits in ``_HEATMAP_PX``, then
    smaller down to ``_MIN_ROW_PX``, so a 256-node fleet is a page to scroll, not 13,000 px."""
    return max(_MIN_ROW_PX, min(_ROW_PX, (_HEATMAP_PX - 70) // max(rows, 1)))


def _rack_labels(rows: Sequence[tuple[str, str, str]]
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rack names left of their nodes, and a rule between racks: (annotations, shapes).
    ``rows``: (cluster, rack, node); rack r1 of two clusters is two racks."""
    labels: list[dict[str, Any]] = []
    rules: list[dict[str, Any]] = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i < len(rows) and rows[i][:2] == rows[start][:2]:
            continue
        labels.append({"text": esc(rows[start][1]), "xref": "paper", "yref": "y", "x": 0,
                       "xanchor": "right", "xshift": -92, "y": (start + i - 1) / 2,
                       "showarrow": False, "font": {"color": theme.MUTED, "size": 12},
                       "textangle": 0})
        if i < len(rows):
            rules.append({"type": "line", "xref": "paper", "yref": "y", "x0": -0.16, "x1": 1,
                          "y0": i - 0.5, "y1": i - 0.5,
                          "line": {"color": theme.GRID, "width": 1, "dash": "dot"}})
        start = i
    return labels, rules


GAP_STEPS = 5  # a pause this many usual sample steps long is a gap, not a slope


def with_gaps(values: Sequence[tuple[int, float]]) -> tuple[list[int], list[float | None]]:
    """(x in ms, y) of a series, with a None wherever it paused for over ``GAP_STEPS`` of its
    usual (median) step: a GPU lost for 30 minutes is a break in its line, not a straight
    slope drawn through readings it never gave. A missed sample or two stays joined."""
    xs, ys = [ts for ts, _ in values], [v for _, v in values]
    steps = sorted(b - a for a, b in zip(xs, xs[1:], strict=False) if b > a)
    if not steps:
        return xs, list(ys)
    longest = GAP_STEPS * steps[len(steps) // 2]
    out_x: list[int] = xs[:1]
    out_y: list[float | None] = ys[:1]
    for (a, _), (b, v) in zip(values, values[1:], strict=False):
        if b - a > longest:
            out_x.append((a + b) // 2)  # plotly breaks a line at a None
            out_y.append(None)
        out_x.append(b)
        out_y.append(v)
    return out_x, out_y


def node_metric_figure(metric: str, title: str, series: GpuSeries, start_ms: int, end_ms: int,
                       annotations: Sequence[Annotation] = (), alerts: Sequence[Alert] = (),
                       height: int = 220, primary: bool = True, limit: float | None = None,
                       focus: int | None = None,
                       limit_lines: Sequence[tuple[float, str]] = ()) -> go.Figure:
    """One metric over time, a line per GPU; faults shaded, alerting GPUs in red.

    Only the ``primary`` panel of a page carries the legend and the fault
    labels: the others share its colours and would only repeat them smaller.
    ``limit`` draws the alert threshold (or the power limit) as a dashed line,
    so that how close a GPU runs to it is seen, not guessed; ``limit_lines`` (value, label)
    draw several, each labelled (GPUs judged by different or assumed limits). ``focus`` (the GPU
    an alert row was clicked for) is drawn on top, the others dimmed.
    """
    if not series:
        return empty_figure(f"No {title.lower()} data for this node in this window", height)
    alerting = {gpu_index(a.device) for a in alerts if a.state in ACTIVE_STATES}
    fig = go.Figure()
    # The focused GPU last, so that it is drawn over the others.
    for gpu, values in sorted(series.items(), key=lambda item: item[0] == focus):
        hot = gpu in alerting
        dimmed = focus is not None and gpu != focus
        xs, ys = with_gaps(values)
        fig.add_trace(go.Scatter(
            x=[utc(ts) for ts in xs], y=ys, mode="lines", connectgaps=False,
            name=f"GPU {gpu}", opacity=0.35 if dimmed else 1.0, line={
                "width": 3 if hot or gpu == focus else 1.5,
                "color": theme.FIRING if hot else theme.GPU_COLOURS[gpu % len(theme.GPU_COLOURS)]},
            hovertemplate=f"GPU {gpu}  %{{y:.1f}} {unit(metric)}<extra></extra>"))
    if limit is not None:
        fig.add_hline(y=limit, line={"color": theme.FIRING, "width": 1, "dash": "dot"},
                      annotation={"text": f"limit {limit:g} {unit(metric)}",
                                  "font": {"size": 11, "color": theme.FIRING}},
                      annotation_position="top left", name=f"limit:{metric}")
    for k, (value, text) in enumerate(limit_lines):
        fig.add_hline(y=value, line={"color": theme.FIRING, "width": 1, "dash": "dot"},
                      annotation={"text": esc(text), "font": {"size": 11, "color": theme.FIRING}},
                      annotation_position="top left" if k % 2 == 0 else "bottom left",
                      name=f"limit:{metric}:{k}")
    _base_layout(fig, height)
    fig.update_layout(
        margin={"l": 64, "r": 16, "t": 12, "b": 32}, hovermode="x unified", showlegend=primary,
        legend={"orientation": "v", "font": {"size": 11, "color": theme.MUTED},
                "bgcolor": "rgba(0,0,0,0)"})
    # The window is what the autorange must include, not a fixed range: a range that slides
    # with "now" on every refresh would undo the user's zoom (plotly keeps a GUI edit under
    # an unchanged uirevision only while the figure's own value is unchanged).
    fig.update_xaxes(autorange=True, autorangeoptions={"include": [utc(start_ms), utc(end_ms)]},
                     gridcolor=theme.GRID, tickfont={"color": theme.MUTED}, title=None)
    fig.update_yaxes(title={"text": f"{title} ({unit(metric)})", "font": {"size": 12}},
                     gridcolor=theme.GRID, zeroline=False, tickfont={"color": theme.MUTED})
    for a in annotations:
        end = a.end_ts * 1000 if a.end_ts is not None else end_ms
        x0, x1 = utc(max(a.start_ts * 1000, start_ms)), utc(min(end, end_ms))
        fig.add_vrect(x0=x0, x1=x1, fillcolor=theme.FAULT_FILL, line_width=0, layer="below",
                      name=f"annotation:{a.kind}:{a.device}")
        if primary:
            fig.add_annotation(x=x0, y=1, xref="x", yref="paper", xanchor="left",
                               yanchor="top", showarrow=False,
                               text=esc(f"{a.kind} · {a.device}: {a.text}"),
                               font={"size": 11, "color": theme.PENDING})
    for a in alerts:
        if a.fired_ts is not None and start_ms <= a.fired_ts * 1000 <= end_ms:
            x = utc(a.fired_ts * 1000)
            fig.add_shape(type="line", x0=x, x1=x, y0=0, y1=1, xref="x", yref="paper",
                          line={"color": theme.FIRING, "width": 1, "dash": "dash"},
                          name=f"fired:{a.device}")
    return fig


Zoom = dict[str, list[Any]]  # axis ("xaxis", "yaxis") -> the [start, end] the user zoomed to


def zoom_after(held: Zoom | None, event: dict[str, Any] | None) -> Zoom:
    """The axes a user has zoomed, after plotly's relayout ``event`` (a drag: ``xaxis.range[0]``
    and ``[1]``, or ``xaxis.range``; a double-click: ``xaxis.autorange``). Other events (a
    resize) leave the zoom as it was."""
    out = dict(held or {})
    for axis in ("xaxis", "yaxis"):
        pair = (event or {}).get(f"{axis}.range")
        if pair is None and f"{axis}.range[0]" in (event or {}):
            pair = [event[f"{axis}.range[0]"], event.get(f"{axis}.range[1]")]  # type: ignore[index]
        if (event or {}).get(f"{axis}.autorange"):
            out.pop(axis, None)
        elif isinstance(pair, list) and len(pair) == 2 and None not in pair:
            out[axis] = pair
    return out


def hold_zoom(fig: go.Figure, zoom: Zoom | None) -> go.Figure:
    """``fig`` shown at the user's ``zoom``: a refresh redraws the data, not the view.

    plotly's ``uirevision`` alone does not hold it: Dash re-plots the figure it was sent
    after a zoom, which clears plotly's record of the edit, and the next refresh wins."""
    if fig.data and zoom:
        for axis, pair in zoom.items():
            fig.update_layout({axis: {"range": pair, "autorange": False}})
    return fig

