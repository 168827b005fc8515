"""The monthly report as one self-contained HTML file: the number first, then why.

Plotly's JavaScript is inlined once, so the file opens anywhere, offline.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime, timezone

import plotly.graph_objects as go
import plotly.io as pio

from fleetwatch import amounts
from fleetwatch.report import Line, Report
from fleetwatch.xids import describe

_CSS = """
body{font-family:-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;margin:0;
background:#f6f7f9;color:#1d2430}
main{max-width:1100px;margin:0 auto;padding:28px 32px 60px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:34px 0 10px;
border-bottom:1px solid #dde1e7;padding-bottom:6px}
.sub{color:#5b6676;margin:0 0 22px}
.hero{display:flex;gap:12px}
.tile{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 18px;
min-width:0;flex:1}
.tile .label{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:#5b6676}
.tile .value{font-size:26px;font-weight:600;margin-top:4px}
.tile .detail{font-size:12px;color:#5b6676;margin-top:2px}
.tile.main{background:#12344d;color:#fff;flex:1.6}
.tile.main .label,.tile.main .detail{color:#c9d7e3}
.tile.main .value{font-size:34px}
.tile.warn{border-color:#e0a100;background:#fff8e6}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{padding:6px 10px;border-bottom:1px solid #eceff3;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f0f2f5;font-weight:600}
tr.total td{font-weight:600;border-top:2px solid #9aa4b2}
.chart{background:#fff;border:1px solid #dde1e7;border-radius:8px;margin:10px 0}
.note{font-size:13px;color:#3d4856;line-height:1.5}
.grid2{display:grid;grid-template-columns:1fr 1fr;gap:14px}
ul.method li{margin:4px 0}
"""


def _n(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def _tile(label: str, value: str, detail: str = "", tone: str = "") -> str:
    return (f'<div class="tile {tone}"><div class="label">{html.escape(label)}</div>'
            f'<div class="value">{html.escape(value)}</div>'
            f'<div class="detail">{html.escape(detail)}</div></div>')


def _table(lines: Sequence[Line], total: Line, currency: str, limit: int, what: str,
           per_cluster: bool = False) -> str:
    """``per_cluster``: a last column names each row's cluster (jobs and nodes, whose
    names repeat across clusters)."""
    head = ("<tr><th>{}</th><th>IT kWh</th><th>facility kWh</th><th>kg CO2e</th>"
            f"<th>cost ({html.escape(currency)})</th><th>GPU-hours</th>"
            "<th>idle share (of GPU time)</th><th>idle energy (of GPU kWh)</th>"
            "<th>GPU-h above TDP</th><th>GPU-h missing</th>"
            + ("<th>cluster</th>" if per_cluster else "") + "</tr>").format(html.escape(what))

    def row(x: Line, cls: str = "") -> str:
        return (f'<tr class="{cls}"><td>{html.escape(x.name)}</td><td>{_n(x.it_kwh)}</td>'
                f"<td>{_n(x.facility_kwh)}</td><td>{_n(x.co2e_kg)}</td><td>{_n(x.cost, 2)}</td>"
                f"<td>{_n(x.gpu_hours)}</td><td>{x.idle_time_share:.1%}</td>"
                f"<td>{x.idle_energy_share:.1%}</td>"
                f"<td>{_n(x.over_tdp_gpu_hours)}</td><td>{_n(x.missing_gpu_hours)}</td>"
                + (f"<td>{html.escape(x.cluster)}</td>" if per_cluster else "") + "</tr>")

    body = [row(x) for x in lines[:limit]]
    if len(lines) > limit:
        rest = Line("", f"{len(lines) - limit} more (all in the CSV)")
        for x in lines[limit:]:
            rest.add(x.it_kwh, x.facility_kwh, x.co2e_kg, x.cost, x.gpu_hours, x.idle_kwh,
                     x.idle_gpu_hours, x.gpu_kwh, x.over_tdp_gpu_hours, x.missing_gpu_hours)
        body.append(row(rest))
    body.append(row(Line("", "Total", **{k: getattr(total, k) for k in (
        "it_kwh", "facility_kwh", "co2e_kg", "cost", "gpu_hours", "idle_kwh", "idle_gpu_hours",
        "gpu_kwh", "over_tdp_gpu_hours", "missing_gpu_hours")}), "total"))
    return f"<table>{head}{''.join(body)}</table>"


def _day(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, timezone.utc)


def _date(r: Report, ts: int) -> str:
    """A day (its local midnight) as a category label: plotly would centre a date's bar on
    its midnight."""
    return r.local(ts).strftime("%d %b")


def _figures(r: Report) -> list[go.Figure]:
    layout = dict(template="plotly_white", height=320, margin=dict(l=60, r=20, t=50, b=40),
                  legend=dict(orientation="h", y=-0.2))
    daily = go.Figure(layout=layout)
    for cluster, days in sorted(r.daily.items()):
        xs = sorted(days)
        daily.add_bar(x=[_date(r, d) for d in xs], y=[days[d][1] for d in xs], name=cluster)
    daily.update_layout(title=f"kg CO2e per day ({r.tz} days), by cluster", barmode="stack",
                        yaxis_title="kg CO2e", xaxis_type="category")
    energy = go.Figure(layout=layout)
    days = sorted({d for v in r.daily.values() for d in v})
    it = [sum(v.get(d, [0, 0, 0])[0] for v in r.daily.values()) for d in days]
    idle = [sum(v.get(d, [0, 0, 0])[2] for v in r.daily.values()) for d in days]
    energy.add_bar(x=[_date(r, d) for d in days], y=[a - b for a, b in zip(it, idle)],
                   name="GPUs at work, CPUs, rest of node", marker_color="#2f6690")
    energy.add_bar(x=[_date(r, d) for d in days], y=idle, name="idle GPUs",
                   marker_color="#e0a100")
    energy.update_layout(title=f"IT energy per day ({r.tz} days, kWh): idle GPUs apart",
                         barmode="stack",
                         yaxis_title="kWh", xaxis_type="category")
    ci = go.Figure(layout=layout)
    # The cluster whose grid the first line is when every cluster has its own (else None).
    all_own = next((c for c, v in r.cluster_intensity.items() if v is r.hourly_intensity),
                   None)
    whose = ("" if not r.cluster_intensity else " (other clusters)" if all_own is None
             else f" ({all_own})")
    ci.add_scatter(x=[_day(h) for h, _, _ in r.hourly_intensity],
                   y=[v for _, v, _ in r.hourly_intensity], mode="lines",
                   name=f"grid intensity{whose}",
                   line=dict(color="#3a7d44", width=1))
    for cluster, series in sorted(r.cluster_intensity.items()):  # carbon.clusters' grids
        if series is not r.hourly_intensity:
            ci.add_scatter(x=[_day(h) for h, _, _ in series], y=[v for _, v, _ in series],
                           mode="lines", name=f"grid intensity ({cluster})", line=dict(width=1))
    filled = [(h, v) for h, v, f in r.hourly_intensity if f]
    if filled:
        ci.add_scatter(x=[_day(h) for h, _ in filled], y=[v for _, v in filled],
                       mode="markers", name="filled hour (no data)",
                       marker=dict(color="#c0392b", size=8, symbol="x"))
    # The grid's series are hourly in UTC, as the ledger's hours: drawn as they are.
    ci.update_layout(title="Grid carbon intensity used, per hour (gCO2e/kWh)",
                     yaxis_title="gCO2e/kWh", xaxis_title="UTC")
    jobs = sorted((x for x in r.lines["job"] if x.name != "(no job)"),
                  key=lambda x: -x.co2e_kg)[:15][::-1]
    top = go.Figure(layout=layout | {"height": 420})
    top.add_bar(y=[f"{x.cluster}/{x.name}" for x in jobs], x=[x.co2e_kg for x in jobs],
                orientation="h",
                marker_color="#2f6690", name="kg CO2e",
                customdata=[[x.it_kwh, x.idle_time_share * 100] for x in jobs],
                hovertemplate="%{y}: %{x:.1f} kg CO2e, %{customdata[0]:.0f} kWh, "
                              "%{customdata[1]:.0f}% of its GPU time idle<extra></extra>")
    top.update_layout(title="The 15 jobs that emitted most (kg CO2e)", xaxis_title="kg CO2e")
    return [daily, energy, ci, top]


def _offenders(r: Report) -> str:
    """The worst nodes by lemon score, with their XIDs of the month."""
    pruned = ""
    if r.events_kept_since_ts is not None:
        pruned = (f"Events before {r.local(r.events_kept_since_ts):%d %b %Y %H:%M} {r.tz} are "
                  "past store.rollup_retention_d (deleted from the store): ")
    if not r.offenders and pruned:
        return (f"<p class='note'>{html.escape(pruned)}this period's repeat offenders are "
                "unknown, not absent. A copy of the store made before then (fleetwatch backup) "
                "still holds them: report --store COPY.</p>")
    if not r.offenders:
        return ("<p class='note'>No node has a lemon score: no hardware XID or lost GPU in "
                "the store's events of the last weeks (or the store keeps no events).</p>")
    rows = "".join(
        f"<tr><td>{html.escape(o.cluster)}</td><td>{html.escape(o.node)}</td>"
        f"<td>{o.score:.1f}</td><td>{html.escape(_xid_list(o.xids))}</td></tr>"
        for o in r.offenders)
    if pruned:
        pruned = f"{pruned}the scores count only the events kept since. "
    return (f"<p class='note'>{html.escape(pruned)}Nodes by lemon score at the end of the "
            "period: points per "
            "hardware XID incident and lost GPU, halving every models.lemon_half_life_d days "
            "(application XIDs score nothing); a node past models.lemon_threshold raises "
            "lemon_node.</p><table><tr><th>cluster</th><th>node</th><th>lemon score</th>"
            f"<th>XIDs this month (code x count)</th></tr>{rows}</table>")


def _xid_list(xids: dict[int, int]) -> str:
    return ", ".join(f"{c} ({describe(c).name}) x{n}" for c, n in xids.items()) or "none"


def render(r: Report, store_name: str = "") -> str:
    s = r.summary()
    t = r.total
    month = r.local(r.start_ts).strftime("%B %Y")
    span = (f"{r.local(r.start_ts):%d %b %H:%M} to {r.local(r.end_ts):%d %b %H:%M} {r.tz} "
            f"({(r.end_ts - r.start_ts) / 3600:,.0f} hours)")
    status = r.coverage()
    tiles = [
        _tile("Carbon emitted", amounts.mass(t.co2e_kg),
              f"location-based, scope 2 · {status}", "main"),
        _tile("Facility energy", amounts.energy(t.facility_kwh),
              f"IT {amounts.energy(t.it_kwh)} x PUE"),
        _tile("Cost", amounts.money(t.cost, r.currency), "facility kWh x price"),
        _tile("GPU-hours", amounts.sig(t.gpu_hours),
              f"{s['idle_time_share']:.0%} of them idle"),
        _tile("Idle GPU energy", amounts.energy(t.idle_kwh),
              f"{t.idle_energy_share:.1%} of GPU energy",
              "warn" if t.idle_energy_share > 0.1 else ""),
    ]
    if r.series_warning:
        tiles.append(_tile("Carbon factors", "Fallback used", r.series_warning, "warn"))
    if r.clusters_warning:
        tiles.append(_tile("Cluster grids", "Table unused", r.clusters_warning, "warn"))
    if r.silent:
        tiles.append(_tile("Silent nodes", f"{len(r.silent):,}",
                           f"{_n(r.uncounted_gpu_hours)} GPU-hours since their last frame "
                           "not counted yet", "warn"))
    if r.projected_co2e_kg is not None:
        tiles.append(_tile("Projected month", amounts.mass(r.projected_co2e_kg),
                           "at the rate of the hours with data"))
    elif r.projection[1]:
        tiles.append(_tile("Projected month", "withheld", r.projection[1], "warn"))
    elif r.status == "partial":
        tiles.append(_tile("Hours with data", f"{r.data_hours_said} of {r.hours_so_far:,}",
                           "the rest of the month is not in these numbers", "warn"))
    figs = _figures(r)
    charts = [pio.to_html(f, full_html=False, include_plotlyjs=(i == 0),
                          config={"displaylogo": False}) for i, f in enumerate(figs)]
    missing_share = float(s["missing_share"])  # type: ignore[arg-type]
    quality = (
        f"<p class='note'>Coverage: {html.escape(status)}. Hours with no data at all are "
        f"in no number here, and nothing is estimated for them. GPU time within the "
        f"covered hours with no usable measurement (gaps between samples longer than "
        f"energy.max_gap_s that no sound energy counter measured, lost GPUs): "
        f"<b>{_n(t.missing_gpu_hours)} GPU-hours</b> "
        f"({missing_share:.2%} of GPU time); no energy is invented for it, so the totals are "
        f"low by about that share. "
        + (f"In the totals: {html.escape(r.gaps_said())}. " if r.gap_kwh else "")
        + f"A node silent for longer than 7 days is not counted "
        f"as missing: that silence is in no number here (the processor logs it once per "
        f"node, \"sent nothing from ... to ...\"). Hours whose grid intensity was missing "
        f"and filled: "
        f"<b>{r.intensity_filled_hours}</b>; PUE filled: <b>{r.pue_filled_hours}</b>. "
        f"GPU-hours above the {html.escape('TDP')} threshold: "
        f"<b>{_n(t.over_tdp_gpu_hours)}</b>.</p>")
    devices = ", ".join(f"{k} {amounts.energy(v)}" for k, v in r.devices.items() if v)
    rest = ("the rest of the node (fans, NICs, NVSwitches, memory, drives) from the "
            "configured static model (energy.node_static_w)" if r.devices.get("rest") else
            "the rest of the node (fans, NICs, NVSwitches, memory, drives) is NOT counted: "
            "energy.node_static_w is 0, so IT energy here is GPUs and CPU packages only; set "
            "it to the node's measured draw less its GPUs and CPUs to count it")
    method = "".join(f"<li>{html.escape(m)}</li>" for m in r.method) + (
        "<li>Energy per GPU from NVML's total energy counter where the GPU has one (a counter "
        "that went down, a driver reload, falls back to power), else the trapezoid of board "
        f"power over time; CPU packages from RAPL; {html.escape(rest)}. Integrated once by "
        "the processor into hourly rows; this report adds "
        "them up.</li><li>Idle: a GPU powered but doing no work (SM activity under the "
        "configured ratio; without SM activity, 0% utilization at both ends of the interval, "
        "job or not). Each breakdown "
        "(job, user, team, node, cluster) is a partition of the same rows and sums to the "
        f"total.</li><li>Energy by device: {html.escape(devices)}.</li>")
    where = f" · store: {html.escape(store_name)}" if store_name else ""
    body = f"""
<main>
<h1>GPU fleet energy and carbon — {html.escape(month)}</h1>
<p class="sub">{html.escape(status[:1].upper() + status[1:])} ·
generated {html.escape(str(s['generated'])[:16].replace('T', ' '))} {html.escape(r.tz)}{where}
· month: {html.escape(span)}</p>
<div class="hero">{''.join(tiles)}</div>
<div class="chart">{charts[0]}</div>
<div class="chart">{charts[1]}</div>
<h2>Where it went</h2>
<h3>By cluster</h3>{_table(r.lines['cluster'], t, r.currency, 20, 'cluster')}
<h3>By team</h3>{_table(r.lines['team'], t, r.currency, 20, 'team')}
<div class="chart">{charts[3]}</div>
<h3>By job (top 25)</h3>{_table(r.lines['job'], t, r.currency, 25, 'job', True)}
<h3>By user (top 25)</h3>{_table(r.lines['user'], t, r.currency, 25, 'user')}
<h3>By node (top 25)</h3>{_table(r.lines['node'], t, r.currency, 25, 'node', True)}
<h3>By rack</h3>{_table(r.lines['rack'], t, r.currency, 100, 'rack', True)}
<h3>By GPU part</h3>{_table(r.lines['part'], t, r.currency, 100, 'GPU part')}
<h2>Repeat offenders</h2>{_offenders(r)}
<h2>Data quality</h2>{quality}
<div class="chart">{charts[2]}</div>
<h2>Method and sources</h2><ul class="method note">{method}</ul>
</main>"""
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>fleetwatch energy "
            f"{html.escape(r.month)}</title><style>{_CSS}</style></head><body>{body}"
            "</body></html>")
