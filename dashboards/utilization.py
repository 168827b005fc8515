"""The utilization page (``/utilization?range=1h&node=node-001&gpu=3``): the distributions
the Acme study drew (CDFs of SM activity, GPU utilization, memory used, power) per
cluster, the idle-GPU share over time, and GPU-hours and idle share per job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
import numpy as np
from dash import Input, Output, State, dcc, html

from fleetwatch.dashboards import components, energy_figures, timerange
from fleetwatch.dashboards.energy_data import NO_NAME
from fleetwatch.pipeline.store.base import StoreError, gpu_device

PATH = "/utilization"
DEFAULT_RANGE = "1h"
# (metric, title, axis title, scale to the axis unit)
CDFS = (("gpu_sm_active_ratio", "SM activity", "SM active ratio", 1.0),
        ("gpu_util_pct", "GPU utilization", "% of time a kernel ran", 1.0),
        ("gpu_fb_used_bytes", "Memory used", "GiB", 1 / 2**30),
        ("gpu_power_w", "Power", "W", 1.0))
_GRAPH = {"displayModeBar": False}


def _graph_id(metric: str) -> str:
    return f"util-cdf-{metric}"


def layout(refresh_s: float, search: str | None = None) -> html.Div:
    q = timerange.parse(search, DEFAULT_RANGE)
    scope = "whole fleet" if not q.node else (
        f"{q.node}" + (f" · GPU {q.gpu}" if q.gpu is not None else ""))
    panels = [html.Section(className="panel", children=[
        html.Div(className="panel-head", children=[
            html.H2(title), html.Span("CDF · per cluster · minute means past 6 h",
                                      className="panel-hint")]),
        dcc.Graph(id=_graph_id(metric), figure=energy_figures.empty_figure("Loading…", 240),
                  config=_GRAPH)]) for metric, title, _, _ in CDFS]
    return html.Div(className="page", children=[
        dcc.Interval(id="util-tick", interval=int(max(refresh_s, 15.0) * 1000)),
        dcc.Store(id="util-scope", data={"node": q.node, "gpu": q.gpu}),
        html.Div(className="page-head", children=[
            html.H1(["Utilization ", html.Span(scope, id="util-scope-text",
                                               className="scope")]),
            timerange.picker("util", q.range),
            html.Div(id="util-updated", className="updated")]),
        html.Div(id="util-notice"),
        html.Div(className="node-grid two", children=panels),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Idle GPUs over time"),
                html.Span("share of GPU time idle, per hour, per cluster (from the ledger)",
                          className="panel-hint")]),
            dcc.Graph(id="util-idle", figure=energy_figures.empty_figure("Loading…", 220),
                      config=_GRAPH)]),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[html.H2("Jobs"), html.Span(
                "GPU-hours and idle share in range", className="panel-hint")]),
            html.Div(id="util-jobs")]),
    ])


def _samples(store: Any, metric: str, start_ms: int, end_ms: int, node: str | None,
             gpu: int | None) -> dict[str, np.ndarray]:
    device = gpu_device(gpu) if node and gpu is not None else None
    groups: dict[str, list[float]] = {}
    for key, _, value in store.range(metric, start_ms, end_ms, node=node, device=device):
        if key.device.startswith("gpu"):
            groups.setdefault(key.cluster, []).append(value)
    return {k: np.asarray(v) for k, v in groups.items()}


def job_table(totals: list[Any]) -> html.Div:
    acc: dict[str, list[float]] = {}
    for t in totals:
        a = acc.setdefault(t.name or NO_NAME["job"], [0.0, 0.0])
        a[0] += t.gpu_s
        a[1] += t.idle_s
    if not acc:
        return html.Div("No jobs in this range", className="empty-note", id="util-jobs-empty")
    rows = sorted(acc.items(), key=lambda kv: -kv[1][0])[:20]
    head = html.Tr([html.Th(h) for h in ("Job", "GPU-hours", "Idle share")])
    body = [html.Tr(className="job-row", children=[
        html.Td(name), html.Td(f"{gpu_s / 3600:,.1f}", className="num"),
        html.Td(f"{idle_s / gpu_s:.0%}" if gpu_s else "n/a", className="num")])
        for name, (gpu_s, idle_s) in rows]
    return html.Table([html.Thead(head), html.Tbody(body)], className="alerts",
                      id="util-job-table")


def register(app: dash.Dash, store: Any, clock: Callable[[], float]) -> None:
    outputs = [Output(_graph_id(m), "figure") for m, _, _, _ in CDFS]

    @app.callback(*outputs, Output("util-idle", "figure"), Output("util-jobs", "children"),
                  Output("util-notice", "children"), Output("util-updated", "children"),
                  Input("util-tick", "n_intervals"), Input("util-range", "value"),
                  State("util-scope", "data"))
    def refresh(_n: int | None, rng: str, scope: dict[str, Any] | None) -> tuple[Any, ...]:
        now = clock()
        start, end = timerange.window(rng, now)
        node, gpu = (scope or {}).get("node"), (scope or {}).get("gpu")
        try:
            figs = [energy_figures.cdf(
                _samples(store, m, int(start * 1000), int((end + 120) * 1000), node, gpu),
                axis, scale=scale) for m, _, axis, scale in CDFS]
            first = start - start % 3600
            totals = store.energy_totals(first, end + 3600, "cluster")
            jobs = store.energy_totals(first, end + 3600, "job")
        except StoreError as exc:
            return (*[dash.no_update] * (len(CDFS) + 2),
                    components.notice(f"Store unavailable: {exc}"), dash.no_update)
        hours = sorted({t.bucket_ts for t in totals})
        index = {h: i for i, h in enumerate(hours)}
        shares: dict[str, list[float]] = {}
        gpu_s: dict[str, list[float]] = {}
        for t in totals:
            shares.setdefault(t.name, [0.0] * len(hours))[index[t.bucket_ts]] += t.idle_s
            gpu_s.setdefault(t.name, [0.0] * len(hours))[index[t.bucket_ts]] += t.gpu_s
        idle = {k: [i / g if g else 0.0 for i, g in zip(v, gpu_s[k])] for k, v in shares.items()}
        notice = None if any(f.data for f in figs) else components.notice(
            "No samples in this range yet", "util-empty")
        return (*figs, energy_figures.idle_share(hours, idle), job_table(jobs), notice,
                components.updated_stamp(now))

    @app.callback(Output("url", "search", allow_duplicate=True),
                  Input("util-range", "value"), State("util-scope", "data"),
                  prevent_initial_call=True)
    def link(rng: str, scope: dict[str, Any] | None) -> str:
        return timerange.Query(rng, (scope or {}).get("node"), (scope or {}).get("gpu")).search()
