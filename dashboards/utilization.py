"""The utilization page (``/utilization?range=1h&cluster=c1&node=node-001&gpu=3``): the
distributions the Acme study drew (CDFs of SM activity, GPU utilization, memory used, power)
per cluster, the idle-GPU share over time, and GPU-hours and idle share per job; all of the
fleet, or of the cluster, node (and GPU) the URL names.

The CDFs are of minute means (one value per GPU per minute, from the store's one-minute
rollups), whatever the range: the same basis for an hour and a month, and a read that
costs a fleet's minutes rather than its samples (every sample of 2,048 GPUs over an hour
took 54 s). A minute is rolled up a few minutes after it closes; where the range has no
rollup yet (a store minutes old) or the store keeps none, the page reads the samples
and its panels say so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import dash
import numpy as np
from dash import Input, Output, State, dcc, html

from fleetwatch.dashboards import components, energy_figures, figures, live, timerange
from fleetwatch.dashboards.energy_data import NO_NAME, hourly_idle
from fleetwatch.pipeline.store.base import RAW_SPAN_MS, StoreError, gpu_device, gpu_index
from fleetwatch.pipeline.store.ledger import EnergyTotal

PATH = "/utilization"
DEFAULT_RANGE = "1h"
# (metric, title, axis title, scale to the axis unit)
CDFS = (("gpu_sm_active_ratio", "SM activity", "SM active ratio", 1.0),
        ("gpu_util_pct", "GPU utilization", "% of time a kernel ran", 1.0),
        ("gpu_fb_used_bytes", "Memory used", "GiB", 1 / 2**30),
        ("gpu_power_w", "Power", "W", 1.0))
_GRAPH = {"displayModeBar": False}
MINUTE_MEANS, SAMPLES = "minute means", "every sample"


def _graph_id(metric: str) -> str:
    return f"util-cdf-{metric}"


def layout(refresh_s: float, search: str | None = None) -> html.Div:
    q = timerange.parse(search, DEFAULT_RANGE)
    scope = ("whole fleet" if not q.cluster else f"cluster {q.cluster}") if not q.node else (
        (f"{q.cluster}/" if q.cluster else "") + f"{q.node}"
        + (f" · GPU {q.gpu}" if q.gpu is not None else ""))
    # what the ledger panels cover, said plainly
    of = "" if not q.node and not q.cluster else f" of {scope}"
    panels = [html.Section(className="panel", children=[
        html.Div(className="panel-head", children=[
            html.H2(title), html.Span(cdf_hint(MINUTE_MEANS), id=_hint_id(metric),
                                      className="panel-hint")]),
        dcc.Graph(id=_graph_id(metric), figure=energy_figures.empty_figure("Loading…", 240),
                  config=_GRAPH)]) for metric, title, _, _ in CDFS]
    return html.Div(className="page", children=[
        dcc.Interval(id="util-tick", interval=int(max(refresh_s, 15.0) * 1000)),
        dcc.Store(id="util-scope", data={"node": q.node, "gpu": q.gpu}),
        dcc.Store(id=components.zoom_store("util")),
        dcc.Store(id="util-drawn"),  # whether a read has drawn the panels yet
        html.Div(className="page-head", children=[
            html.H1(["Utilization ", html.Span(scope, id="util-scope-text",
                                               className="scope")]),
            components.cluster_picker("util", q.cluster),
            timerange.picker("util", q.range),
            html.Div(id="util-updated", className="updated")]),
        *live.parts("util"),  # the banner while the dashboard is away
        html.Div(id="util-notice"),
        html.Div(className="node-grid two", children=panels),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Idle GPUs over time"),
                html.Span(f"share of GPU time{of} idle, per hour, per cluster (from the ledger)",
                          className="panel-hint", id="util-idle-hint")]),
            html.Div("An hour without data is a gap, not 0 % idle; a shaded bar is the "
                     "share of the hour's GPU time without data (a silent node, a lost GPU).",
                     className="panel-hint"),
            dcc.Graph(id="util-idle", figure=energy_figures.empty_figure("Loading…", 220),
                      config=_GRAPH)]),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[html.H2("Jobs"), html.Span(
                f"GPU-hours and idle share{of} in the whole hours the range touches",
                className="panel-hint", id="util-jobs-hint")]),
            html.Div(id="util-jobs")]),
    ])


GRAPHS = [_graph_id(m) for m, _, _, _ in CDFS] + ["util-idle"]


def _hint_id(metric: str) -> str:
    return f"util-hint-{metric}"


def cdf_hint(basis: str) -> str:
    return f"CDF · per cluster · {basis}"


Groups = dict[str, dict[str, np.ndarray]]  # metric -> cluster -> values
Gpus = dict[str, set[tuple[str, str, str]]]  # metric -> the (cluster, node, device) drawn
SM = "gpu_sm_active_ratio"


class CdfRead(NamedTuple):
    samples: Groups
    basis: str       # MINUTE_MEANS or SAMPLES
    gpus: Gpus       # which GPUs each metric's values come from


def cdf_samples(store: Any, start_ms: int, end_ms: int, node: str | None,
                gpu: int | None, cluster: str | None = None) -> CdfRead:
    """Per metric and cluster, the GPU values the CDFs of [start, end) are drawn from, what
    they are (``MINUTE_MEANS`` or ``SAMPLES``) and of which GPUs. ``gpu`` counts only with
    ``node``; ``cluster``: of that cluster only (a node name may be in several)."""
    device = gpu_device(gpu) if node and gpu is not None else None
    metrics = [m for m, _, _, _ in CDFS]
    parts: dict[str, dict[str, list[float]]] = {m: {} for m in metrics}
    gpus: Gpus = {m: set() for m in metrics}
    if node is None and hasattr(store, "minute_means"):  # the whole fleet in one pass
        for metric, series in store.minute_means(metrics, start_ms, end_ms).items():
            for key, _, means in series:
                if gpu_index(key.device) is not None and cluster in (None, key.cluster):
                    parts[metric].setdefault(key.cluster, []).extend(means.tolist())
                    gpus[metric].add((key.cluster, key.node, key.device))
    elif hasattr(store, "rollups"):  # one node's minutes: a few hundred rows
        for metric in metrics:
            for key, _, n, total, _, _ in store.rollups(metric, start_ms, end_ms, node, device,
                                                        cluster):
                if gpu_index(key.device) is not None:
                    parts[metric].setdefault(key.cluster, []).append(total / n)
                    gpus[metric].add((key.cluster, key.node, key.device))
    basis = MINUTE_MEANS
    if not any(parts.values()):
        # No rollup in range: a young store, or a backend that keeps none. Its range read
        # answers with samples up to RAW_SPAN_MS and with minute means past it.
        basis = MINUTE_MEANS if end_ms - start_ms > RAW_SPAN_MS else SAMPLES
        for metric in metrics:
            for key, _, value in store.range(metric, start_ms, end_ms, node=node, device=device,
                                             cluster=cluster):
                if gpu_index(key.device) is not None:
                    parts[metric].setdefault(key.cluster, []).append(value)
                    gpus[metric].add((key.cluster, key.node, key.device))
    return CdfRead({m: {c: np.asarray(v) for c, v in by.items()} for m, by in parts.items()},
                   basis, gpus)


NO_SM = ("no DCGM profiling, and NVML gives SM activity only through GPM, on Hopper and "
         "newer")


def sm_coverage(gpus: Gpus, node: str | None, gpu: int | None) -> tuple[str, str]:
    """What the SM-activity panel says of the GPUs it covers: (a note for its hint, the
    sentence of an empty panel). Only part of a fleet reports SM activity (GPUs before Hopper
    without DCGM report none), and a CDF of that part must not pass for the fleet's."""
    seen = set().union(*gpus.values())
    sm = gpus.get(SM, set())
    note = (f" · from {len(sm)} of {len(seen)} GPUs; the others report none "
            "(no DCGM, no GPM)"
            if sm and len(sm) < len(seen) else "")
    if sm or not seen:
        return note, "No samples in this range"
    what = (f"GPU {gpu} of {node} reports" if node and gpu is not None else
            f"No GPU of {node} reports" if node else "No GPU reports")
    return note, (f"{what} no SM activity ({NO_SM}); its utilization, memory and power are "
                  f"drawn beside" if node and gpu is not None else
                  f"{what} SM activity ({NO_SM}); utilization, memory and power are drawn "
                  "beside")


def ledger_totals(store: Any, start_s: float, end_s: float, node: str | None,
                  gpu: int | None, cluster: str | None = None
                  ) -> tuple[list[EnergyTotal], list[EnergyTotal]]:
    """The ledger's hours in [start, end), per cluster and per job: the fleet's, or those
    of ``cluster`` and ``node``'s GPUs (of GPU ``gpu`` only, if given) summed from its
    rows. Jobs are per cluster (``EnergyTotal.cluster``): each cluster's scheduler numbers
    its own, so job 4000004 of one cluster is not that of another."""
    if not node and not cluster:
        return store.energy_totals(start_s, end_s, "cluster"), store.energy_totals(
            start_s, end_s, "job", per_cluster=True)
    wanted = gpu_device(gpu) if node and gpu is not None else None
    rows = [r for r in store.energy(start_s, end_s, cluster=cluster, node=node or None)
            if gpu_index(r.device) is not None and wanted in (None, r.device)]
    return _sum_rows(rows, "cluster"), _sum_rows(rows, "job", per_cluster=True)


def _sum_rows(rows: list[Any], by: str, per_cluster: bool = False) -> list[EnergyTotal]:
    acc: dict[tuple[int, str, str], list[float]] = {}
    for r in rows:
        key = (r.bucket_ts, getattr(r, by), r.cluster if per_cluster else "")
        a = acc.setdefault(key, [0.0] * 7)
        for i, v in enumerate((r.energy_j, r.idle_j, r.energy_j, r.seconds, r.idle_s,
                               r.missing_s, r.over_tdp_s)):
            a[i] += v
    return [EnergyTotal(h, name, *a, cluster=c) for (h, name, c), a in sorted(acc.items())]


def job_table(totals: list[Any]) -> html.Div:
    """GPU-hours and idle share per (cluster, job), the 20 largest."""
    acc: dict[tuple[str, str], list[float]] = {}
    for t in totals:
        a = acc.setdefault((t.cluster, t.name or NO_NAME["job"]), [0.0, 0.0])
        a[0] += t.gpu_s
        a[1] += t.idle_s
    if not acc:
        return html.Div("No jobs in this range", className="empty-note", id="util-jobs-empty")
    rows = sorted(acc.items(), key=lambda kv: (-kv[1][0], kv[0]))[:20]
    head = html.Tr([html.Th(h) for h in ("Cluster", "Job", "GPU-hours", "Idle share")])
    body = [html.Tr(className="job-row", children=[
        html.Td(cluster), html.Td(name), html.Td(f"{gpu_s / 3600:,.1f}", className="num"),
        html.Td(f"{idle_s / gpu_s:.0%}" if gpu_s else "n/a", className="num")])
        for (cluster, name), (gpu_s, idle_s) in rows]
    return html.Table([html.Thead(head), html.Tbody(body)], className="alerts",
                      id="util-job-table")


def register(app: dash.Dash, store: Any, clock: Callable[[], float]) -> None:
    outputs = [Output(_graph_id(m), "figure") for m, _, _, _ in CDFS] + [
        Output(_hint_id(m), "children") for m, _, _, _ in CDFS]

    @app.callback(*outputs, Output("util-idle", "figure"), Output("util-jobs", "children"),
                  Output("util-notice", "children"), Output("util-updated", "children"),
                  Output("util-drawn", "data"),
                  Output(components.cluster_picker_id("util"), "options"),
                  Input("util-tick", "n_intervals"), Input("util-range", "value"),
                  Input(components.cluster_picker_id("util"), "value"),
                  State("util-scope", "data"), State(components.zoom_store("util"), "data"),
                  State("util-drawn", "data"),
                  running=[(Output("util-tick", "disabled"), True, False)])  # see fleet.py
    def refresh(_n: int | None, rng: str, cluster: str | None, scope: dict[str, Any] | None,
                zoom: dict[str, Any] | None, drawn: bool | None) -> tuple[Any, ...]:
        now = clock()
        start, end = timerange.window(rng, now)
        node, gpu = (scope or {}).get("node"), (scope or {}).get("gpu")
        cluster = cluster or None
        try:
            samples, basis, gpus = cdf_samples(store, int(start * 1000),
                                               int((end + 120) * 1000), node, gpu, cluster)
            sm_note, no_sm = sm_coverage(gpus, node, gpu)
            figs = [energy_figures.cdf(samples[m], axis, scale=scale,
                                       empty=no_sm if m == SM else "No samples in this range")
                    for m, _, axis, scale in CDFS]
            first = start - start % 3600
            totals, jobs = ledger_totals(store, first, end + 3600, node, gpu, cluster)
            seen = ({t.name for t in totals} if not node and not cluster else
                    {t.name for t in store.energy_totals(first, end + 3600, "cluster")})
        except StoreError as exc:
            text = f"Store unavailable: {exc}"
            # The last read's panels stay under the banner; a page that never read says why
            # it is empty instead of "Loading…" for as long as the store is away.
            kept: list[Any] = [dash.no_update] * (2 * len(CDFS) + 2) if drawn else [
                *[energy_figures.empty_figure(text, 240) for _ in CDFS],
                *[dash.no_update] * len(CDFS), energy_figures.empty_figure(text, 220),
                html.Div("No jobs: the store does not answer", className="empty-note",
                         id="util-jobs-empty")]
            return (*kept, components.notice(text), components.failed_stamp(now),
                    dash.no_update, dash.no_update)
        idle = hourly_idle(totals)
        notice = None if any(f.data for f in figs) else components.notice(
            "No samples in this range yet", "util-empty")
        figs.append(energy_figures.idle_share(idle.hours, idle.idle, missing=idle.missing,
                                              missing_h=idle.missing_h))
        for graph, fig in zip(GRAPHS, figs):  # the user's zoom kept; a new range starts clean
            fig.update_layout(uirevision=rng)
            figures.hold_zoom(fig, components.zoomed(zoom, rng, graph))
        return (*figs[:-1], *[cdf_hint(basis) + (sm_note if m == SM else "")
                              for m, _, _, _ in CDFS], figs[-1],
                job_table(jobs), notice,
                components.updated_stamp(now), True,
                components.cluster_options(sorted(seen | {k for by in samples.values()
                                                          for k in by}), cluster))

    components.keep_zoom(app, "util", GRAPHS, "util-range")

    @app.callback(Output("url", "search", allow_duplicate=True),
                  Input("util-range", "value"),
                  Input(components.cluster_picker_id("util"), "value"),
                  State("util-scope", "data"), prevent_initial_call=True)
    def link(rng: str, cluster: str | None, scope: dict[str, Any] | None) -> str:
        return timerange.Query(rng, (scope or {}).get("node"), (scope or {}).get("gpu"),
                               cluster or None).search()
