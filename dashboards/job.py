"""The job page (``/job/<id>?cluster=c&range=6h``): where a job ran, whether it still
runs, its GPUs side by side over its span (a straggler or a hot GPU stands out), each
GPU's medians against the job's, the alerts on its GPUs during it, and its energy.

A job is found by its ``job_start`` / ``job_end`` events (``job_data``). The range is the
job's span by default (its last week if longer); a range picked from the usual ones ends
where the job ended (now while it runs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlencode

import dash
from dash import Input, Output, State, dcc, html

from fleetwatch import amounts
from fleetwatch.amounts import sig
from fleetwatch.carbon import CarbonModel
from fleetwatch.catalogue import catalogue
from fleetwatch.dashboards import alert_tables, components, figures, live, timerange
from fleetwatch.dashboards.components import ago, clock, job_href, stamp
from fleetwatch.dashboards.data import STALE_S
from fleetwatch.dashboards.job_data import (
    CHART_METRICS,
    LOOKBACKS_S,
    MAX_NODES,
    SPAN_CAP_S,
    Job,
    JobView,
    default_window,
    find_jobs,
    gpu_stats,
    read_job,
)
from fleetwatch.dashboards.job_figures import gpu_table, job_figure
from fleetwatch.pipeline.events import split_jobs
from fleetwatch.pipeline.store.base import Store, StoreError
from fleetwatch.pipeline.store.ledger import owner_text

PREFIX = "/job/"
JOB_RANGE = "job"  # the range key of the job's own span: the default
TITLES = {"gpu_sm_active_ratio": "SM activity", "gpu_util_pct": "Utilization",
          "gpu_power_w": "Power", "gpu_temp_c": "Die temperature",
          "gpu_sm_clock_mhz": "SM clock"}
MIN_REFRESH_S = 15.0  # a job's span is days of lines per GPU: not re-read every 5 s


def graph_id(metric: str) -> str:
    return f"job-graph-{metric}"


def hint_id(metric: str) -> str:
    return f"job-hint-{metric}"


def query_of(search: str | None) -> tuple[str | None, str]:
    """(``?cluster=``, ``?range=``; the job's span when absent or unknown)."""
    q = parse_qs((search or "").lstrip("?"))
    cluster = (q.get("cluster") or [None])[0] or None
    return cluster, timerange.parse(search, JOB_RANGE).range


def window(job: Job, rng: str, now_s: float) -> tuple[float, float]:
    """The span drawn: the job's (``default_window``), or at most range ``rng`` of it,
    ending where the job ended (now while it runs)."""
    if rng == JOB_RANGE:
        return default_window(job, now_s)
    start, end = timerange.window(rng, job.end_ts if job.end_ts is not None else now_s)
    return max(start, job.start_ts), end


def range_label(job: Job, rng: str, now_s: float) -> str:
    if rng != JOB_RANGE:
        return timerange.label(rng).replace("last", "the job's last", 1)
    start, end = default_window(job, now_s)
    return "the job's span" if start <= job.start_ts else \
        f"the job's last {SPAN_CAP_S / 86400:.0f} d"


def layout(job: str, refresh_s: float, cluster: str | None = None,
           rng: str = JOB_RANGE) -> html.Div:
    panels = [html.Section(className="panel", children=[
        html.Div(className="panel-head", children=[
            html.H2(TITLES[m], title=catalogue()[m].help),
            html.Span("", id=hint_id(m), className="panel-hint")]),
        dcc.Graph(id=graph_id(m), figure=figures.empty_figure("Loading…", 220),
                  config={"displayModeBar": False})]) for m in CHART_METRICS]
    options = [{"label": "Job's span", "value": JOB_RANGE}] + [
        {"label": text, "value": key} for key, text, _ in timerange.RANGES]
    return html.Div(className="page", children=[
        dcc.Interval(id="job-tick", interval=int(max(refresh_s, MIN_REFRESH_S) * 1000)),
        dcc.Store(id="job-id", data=job),
        dcc.Store(id="job-cluster", data=cluster),
        html.Div(className="page-head", children=[
            html.H1(["Job ", html.Span(job, id="job-title"),
                     html.Span(id="job-owner", className="job-owner")]),
            html.Div(className="range-picker", children=[dcc.RadioItems(
                id="job-range", value=rng, inline=True, options=options,
                className="range-items", inputClassName="range-input",
                labelClassName="range-label")]),
            html.Div(id="job-updated", className="updated")]),
        dcc.Link("← fleet", href="/", className="back-link"),
        *live.parts("job"),
        html.Div(id="job-notice"),
        html.Div(id="job-choices"),
        html.Div(id="job-body", hidden=True, children=[
            html.Div(id="job-summary", className="summary summary-6"),
            html.Div(className="node-grid two job-grid", children=panels),
            components.panel("GPUs against the job",
                             "median over the range · furthest off the job's median first",
                             html.Div(id="job-gpus")),
            components.panel("Alerts on the job's GPUs",
                             "while each GPU held the job; node alerts during the job",
                             html.Div(id="job-alerts"))]),
    ])


def find_box() -> html.Div:
    """"Find a job": an id typed here opens its page (Enter or the button)."""
    return html.Div(className="find-job", children=[
        html.Label([html.Span("Job id", className="visually-hidden"),  # for screen readers
                    dcc.Input(id="find-job-input", type="text", placeholder="job id",
                              className="find-job-input", debounce=False)]),
        html.Button("Find job", id="find-job-go", className="find-job-go")])


def jobs_line(jobs: Mapping[int, str], cluster: str | None = None,
              seen_ms: int | None = 0, now_s: float | None = None,
              silent: bool = False) -> list[Any]:
    """The node page's line of its GPUs' current jobs, each a link to its job page (each
    job of a shared GPU, comma-joined in ``jobs``, its own). ``seen_ms``: the node's newest
    sample in the range (None: none); with ``now_s``, a node silent for longer than
    ``STALE_S`` shows its jobs as last seen, not as now: nothing says they still run.
    ``silent``: the node is judged silent (its node_silent alert fires): as last seen too,
    from then on, as the pager said, not minutes later."""
    silent = silent or (now_s is not None
                        and (seen_ms is None or now_s - seen_ms / 1000 > STALE_S))
    if not jobs:
        return ["No job seen on its GPUs" if silent else "No job on its GPUs now"]
    by_job: dict[str, list[int]] = {}
    for gpu, names in sorted(jobs.items()):
        for name in sorted(split_jobs(names)):
            by_job.setdefault(name, []).append(gpu)
    if not silent:
        head = "Jobs now: "
    elif seen_ms is None:
        head = "No data from it in this range · last job seen: "
    elif now_s is None:  # judged silent by its alert, and no "now" to date its data by
        head = "Node silent · last job seen: "
    else:
        head = f"No data since {stamp(seen_ms / 1000, now_s)} UTC · last job seen: "
    out: list[Any] = [head]
    for i, (name, gpus) in enumerate(sorted(by_job.items(), key=lambda kv: kv[1][0])):
        out += [", " if i else "", dcc.Link(f"job {name}", href=job_href(name, cluster),
                                            className="job-link"),
                f" (GPU{'s' * (len(gpus) > 1)} {', '.join(map(str, gpus))})"]
    return out


def not_found_text(job: str, cluster: str | None, elsewhere: Sequence[Job]) -> str:
    days = LOOKBACKS_S[-1] / 86400
    where = f" in cluster {cluster}" if cluster else ""
    text = (f"No job {job}{where} in the last {days:.0f} days of job events: check the id "
            "(as the scheduler gives it, e.g. a Slurm job id)")
    if elsewhere:
        text += "; it ran in " + ", ".join(j.cluster for j in elsewhere) + ": "
    return text


def choices(job: str, found: Sequence[Job], rng: str) -> html.Ul:
    """One link per cluster that ran a job of this id."""
    carry = None if rng == JOB_RANGE else rng
    return html.Ul(id="job-choice-list", children=[html.Li(className="job-choice", children=[
        dcc.Link(f"job {job} in cluster {j.cluster}", href=job_href(job, j.cluster, carry)),
        f" · {len(j.gpus)} GPUs on {len(j.nodes)} node{'s' * (len(j.nodes) != 1)} · "
        f"from {clock(j.start_ts)} UTC" + ("" if j.running else
                                         f" to {clock(j.end_ts or 0)} UTC")])
        for j in found])


def job_energy(kwh: float) -> str:
    """A job's energy in three figures: Wh below 1 kWh (a short job's 0.03 kWh is not
    "0.0 kWh"), else as everywhere (``amounts.energy``)."""
    return f"{sig(kwh * 1000)} Wh" if abs(kwh) < 0.9995 else amounts.energy(kwh)


def job_gpu_hours(hours: float) -> str:
    """A job's GPU-hours as the report's tables, its CSV (to the tenth) and the utilization
    page show them: one decimal below 1,000 (180.5, not sig's 181), so that the numbers a
    user compares agree; a short job's GPU-minutes in three figures (0.0333, not 0.0);
    thousands whole (``sig``)."""
    if abs(hours) >= 999.95 or abs(hours) < 0.05:
        return sig(hours)
    return f"{hours:.1f}"


def _tile(tile_id: str, label: str, value: str, detail: str = "") -> html.Div:
    return html.Div(className="tile", id=tile_id, children=[
        html.Div(label, className="tile-label"), html.Div(value, className="tile-value"),
        html.Div(detail, className="tile-detail")])


def coverage(gpu_hours: float, missing_h: float) -> str:
    """What the energy tile's figure covers: the whole job, or all but the share of its
    GPU time the ledger has no energy data for (as the energy page's missing tile)."""
    if missing_h <= 0:
        return "the whole job, from the energy ledger"
    share = missing_h / (gpu_hours + missing_h) * 100
    return (f"{job_gpu_hours(missing_h)} GPU-hours ({share:.0f} %) of its GPU time without "
            "energy data, not counted")


def summary(v: JobView, now_s: float) -> list[html.Div]:
    """Cluster, where it ran, when, its state, when its GPUs were last seen, its energy."""
    j = v.job
    started = f"{clock(j.start_ts)} UTC"
    first = "" if all(g.start_known for g in j.gpus) else " (or before: its start is older "\
        "than the events read)"
    last = v.last_seen_ms
    tiles = [
        _tile("job-cluster-tile", "Cluster", j.cluster),
        _tile("job-gpus-tile", "GPUs", str(len(j.gpus)), ", ".join(j.nodes[:8]) + (
            f" and {len(j.nodes) - 8} more" if len(j.nodes) > 8 else "")),
        _tile("job-start-tile", "Started", started, f"{ago(j.start_ts, now_s)}{first}"),
        _tile("job-state-tile", "State", "running" if j.running else "ended",
              "" if j.running else f"{clock(j.end_ts or 0)} UTC · {ago(j.end_ts or 0, now_s)}"),
        _tile("job-seen-tile", "Last seen", f"{clock(last / 1000)} UTC" if last else "—",
              ago(last / 1000, now_s) if last else "no sample in the range")]
    if v.energy is not None:
        e = v.energy
        tiles.append(_tile("job-energy-tile", "Energy", job_energy(e.kwh),
                           f"{amounts.mass(e.co2e_kg)} · {job_gpu_hours(e.gpu_hours)} "
                           f"GPU-hours · {coverage(e.gpu_hours, v.energy_missing_h)}"))
    return tiles


def node_range(start_s: float, now_s: float) -> str | None:
    """The node page's range for a link from here: its ranges end now, so the smallest
    that reaches back to ``start_s`` (None: the node page's default)."""
    back = now_s - start_s
    for key, _, seconds in timerange.RANGES:
        if seconds and seconds >= back:
            return None if key == "1h" else key
    return "30d"


def register(app: dash.Dash, store: Store, clock_: Callable[[], float],
             carbon: CarbonModel | None = None) -> None:
    outputs = [Output("job-notice", "children"), Output("job-choices", "children"),
               Output("job-body", "hidden"), Output("job-summary", "children"),
               Output("job-gpus", "children"), Output("job-alerts", "children"),
               Output("job-updated", "children"), Output("job-owner", "children")]
    outputs += [Output(graph_id(m), "figure") for m in CHART_METRICS]
    outputs += [Output(hint_id(m), "children") for m in CHART_METRICS]

    @app.callback(*outputs, Input("job-tick", "n_intervals"), Input("job-id", "data"),
                  Input("job-cluster", "data"), Input("job-range", "value"),
                  running=[(Output("job-tick", "disabled"), True, False)])  # see fleet.py
    def refresh(_n: int | None, job_id: str, cluster: str | None, rng: str | None
                ) -> tuple[Any, ...]:
        now = clock_()
        rng = rng or JOB_RANGE
        rest = [dash.no_update] * (2 * len(CHART_METRICS))
        try:
            found = find_jobs(store, job_id, now)
            mine = [j for j in found if cluster is None or j.cluster == cluster]
            if len(mine) != 1:
                if not mine:
                    notice = components.notice(not_found_text(job_id, cluster, found),
                                               "job-not-found")
                    return (notice, choices(job_id, found, rng) if found else None, True,
                            None, None, None, components.updated_stamp(now), None, *rest)
                return (components.notice(f"Job {job_id} ran in {len(mine)} clusters: pick "
                                          "one", "job-ambiguous"),
                        choices(job_id, mine, rng), True, None, None, None,
                        components.updated_stamp(now), None, *rest)
            (job,) = mine
            start, end = window(job, rng, now)
            view = read_job(store, job, start, end, now, carbon)
        except StoreError as exc:
            return (components.notice(f"Store unavailable: {exc}"), dash.no_update,
                    dash.no_update, dash.no_update, dash.no_update, dash.no_update,
                    components.failed_stamp(now), dash.no_update, *rest)
        return _drawn(view, rng, now)

    @app.callback(Output("url", "pathname", allow_duplicate=True),
                  Output("url", "search", allow_duplicate=True),
                  Input("find-job-go", "n_clicks"), Input("find-job-input", "n_submit"),
                  State("find-job-input", "value"), prevent_initial_call=True)
    def find(_clicks: int | None, _enter: int | None, typed: str | None) -> tuple[str, str]:
        wanted = (typed or "").strip()
        if not wanted:
            raise dash.exceptions.PreventUpdate
        return job_href(wanted), ""

    @app.callback(Output("url", "search", allow_duplicate=True),
                  Output(components.SHOWN, "data", allow_duplicate=True),
                  Input("job-range", "value"), State("job-cluster", "data"),
                  State("url", "search"), State("url", "pathname"), prevent_initial_call=True)
    def link(rng: str, cluster: str | None, search: str | None, path: str | None
             ) -> tuple[str, list[str]]:
        if query_of(search)[1] == rng:
            raise dash.exceptions.PreventUpdate
        params = ([("cluster", cluster)] if cluster else []) + (
            [("range", rng)] if rng != JOB_RANGE else [])
        search = "?" + urlencode(params) if params else ""
        return search, components.address(path, search)


def _drawn(view: JobView, rng: str, now: float) -> tuple[Any, ...]:
    """What one refresh that found the job shows."""
    job = view.job
    start_ms, end_ms = int(view.start_s * 1000), int(view.end_s * 1000)
    read = set(job.nodes[:MAX_NODES])
    medians, stats = gpu_stats(view.series, [(g.node, g.gpu) for g in job.gpus
                                             if g.node in read])
    carry = node_range(view.start_s, now)
    figs = []
    for i, m in enumerate(CHART_METRICS):
        read = view.drawn[m]
        fig = job_figure(read, TITLES[read], view.series[m], start_ms, end_ms, view.alerts,
                         primary=i == 0)
        fig.update_layout(uirevision=f"{job.job}:{job.cluster}:{rng}")
        figs.append(fig)
    label = range_label(job, rng, now)
    hints = [f"{figures.unit(view.drawn[m])} · {label} · UTC" + (
        " · no SM activity (GPM): utilization" if view.drawn[m] != m else "")
        for m in CHART_METRICS]
    notice = None
    if view.nodes_left:
        notice = components.notice(
            f"Drawn: the job's first {len(job.nodes) - view.nodes_left} nodes; "
            f"{view.nodes_left} more are not read", "job-nodes-left")
    alerts = alert_tables.alert_table(view.alerts, now, "job-alert-table", rng=carry,
                                      empty="No alert on the job's GPUs during the job")
    owner = owner_text(view.owners)
    return (notice, None, False, summary(view, now), gpu_table(job, medians, stats, carry),
            alerts, components.updated_stamp(now), f" · {owner}" if owner else "",
            *figs, *hints)

