"""HTML pieces the pages share: the header, the summary strip, alert tables.

Pure functions of records (and ``now`` for "5 min ago"), so the pages' text
is tested without a browser.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

import dash
from dash import Input, Output, State, dcc, html

from fleetwatch import alert_view
from fleetwatch.dashboards import timerange
from fleetwatch.dashboards.data import TEMP, FleetView, node_label
from fleetwatch.dashboards.figures import NO_DATA, fmt, zoom_after
from fleetwatch.pipeline.links import alert_jobs
from fleetwatch.pipeline.sinks.notified import outcome_text
from fleetwatch.pipeline.store.base import (
    Acknowledgement,
    Alert,
    Notification,
    Silence,
    board_text,
    evidence_value,
    gpu_index,
)

NAV = (("Fleet", "/"), ("Alerts", "/alerts"), ("Utilization", "/utilization"),
       ("Energy", "/energy"), ("Facility", "/facility"))


def clock(ts_s: float) -> str:
    return datetime.fromtimestamp(ts_s, tz=timezone.utc).strftime("%H:%M:%S")


def stamp(ts_s: float, now_s: float) -> str:
    """The time of day, with the date where it is not ``now_s``'s day (UTC): a 7- or
    30-day range's alert is not read as today's."""
    same = datetime.fromtimestamp(ts_s, timezone.utc).date() == datetime.fromtimestamp(
        now_s, timezone.utc).date()
    return clock(ts_s) if same else datetime.fromtimestamp(ts_s, timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S")


def ago(ts_s: float, now_s: float) -> str:
    s = max(0.0, now_s - ts_s)
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 90 * 60:
        return f"{s / 60:.0f} min ago"
    if s < 36 * 3600:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.1f} d ago"


# The store of the address the page on screen was drawn for: the router draws a page
# only for an address it does not show yet (Back, Forward, a link), not for the query
# a range picker just wrote (the picker's callback writes it here too).
SHOWN = "url-shown"


def address(pathname: str | None, search: str | None) -> list[str]:
    """What ``SHOWN`` holds: the path and the query, as the address has them."""
    return [pathname or "/", search or ""]


def link_range(app: dash.Dash, picker: str, default: str, clusters: str) -> None:
    """The page's range picker ``picker`` and cluster picker ``clusters`` write the range
    and the cluster into the address, and into ``SHOWN`` (the view on screen is already that
    address's: nothing is redrawn), so that a link copied then opens this view."""
    @app.callback(Output("url", "search", allow_duplicate=True),
                  Output(SHOWN, "data", allow_duplicate=True),
                  Input(picker, "value"), Input(clusters, "value"), State("url", "search"),
                  State("url", "pathname"), prevent_initial_call=True)
    def link(rng: str, cluster: str | None, search: str | None, path: str | None
             ) -> tuple[str, list[str]]:
        if not timerange.new_search(search, default, rng, cluster):
            raise dash.exceptions.PreventUpdate
        search = timerange.Query(rng, cluster=cluster or None).search()
        return search, address(path, search)


def cluster_picker_id(page: str) -> str:
    return f"{page}-cluster"


def cluster_picker(page: str, value: str | None) -> html.Label:
    """The cluster picker of ``page`` (``?cluster=``): empty for every cluster. Its options
    come with each refresh (``cluster_options``): the clusters the store has now."""
    # A label around it names its input for a screen reader ("Cluster"), not shown.
    return html.Label(className="cluster-picker", children=[
        html.Span("Cluster", className="visually-hidden"), dcc.Dropdown(
        id=cluster_picker_id(page), value=value, options=cluster_options((), value),
        placeholder="all clusters", clearable=True, searchable=True,
        className="cluster-dropdown", style={"minWidth": "11rem"})])


def cluster_options(clusters: Sequence[str], value: str | None) -> list[dict[str, str]]:
    """The picker's options: the clusters seen, and the one picked even if it has gone
    quiet (the address still names it)."""
    names = sorted(set(clusters) | ({value} if value else set()))
    return [{"label": c, "value": c} for c in names]


def zoom_store(page: str) -> str:
    """The id of the store of ``page``'s zoomed charts (``keep_zoom``)."""
    return f"{page}-zoom"


def keep_zoom(app: dash.Dash, page: str, graphs: Sequence[str], picker: str) -> None:
    """Remember what the user zoomed on ``page``'s ``graphs``, in the store ``zoom_store(page)``
    ({"range": the range it was zoomed in, "graphs": {graph id: figures.Zoom}}), for the
    page's refresh to redraw at that zoom (``zoomed``). A new range starts clean."""
    @app.callback(Output(zoom_store(page), "data"),
                  *[Input(g, "relayoutData") for g in graphs],
                  State(zoom_store(page), "data"), State(picker, "value"),
                  prevent_initial_call=True)
    def remember(*args: Any) -> dict[str, Any]:
        held, rng = args[-2] or {}, args[-1]
        graph = dash.ctx.triggered_id
        if graph not in graphs:
            raise dash.exceptions.PreventUpdate
        by_graph = dict(held.get("graphs") or {}) if held.get("range") == rng else {}
        by_graph[graph] = zoom_after(by_graph.get(graph), args[graphs.index(graph)])
        return {"range": rng, "graphs": by_graph}


def zoomed(held: dict[str, Any] | None, rng: str, graph: str) -> dict[str, list[Any]]:
    """The zoom of ``graph`` that ``keep_zoom`` holds for range ``rng`` (none for another)."""
    if not held or held.get("range") != rng:
        return {}
    return dict((held.get("graphs") or {}).get(graph) or {})


def nav_id(label: str) -> str:
    return f"nav-{label.lower()}"


def nav_classes(pathname: str | None) -> list[str]:
    """The nav links' classes, the current page's marked active (a node page counts as Fleet)."""
    path = (pathname or "/").rstrip("/") or "/"
    current = next((h for _, h in reversed(NAV) if h != "/" and path.startswith(h)), "/")
    return ["nav-link active" if href == current else "nav-link" for _, href in NAV]


def header(title: str) -> html.Header:
    return html.Header(className="topbar", children=[
        html.Div(className="brand", children=[html.Span("▣", className="logo"), title]),
        html.Nav([dcc.Link(label, href=href, className="nav-link", id=nav_id(label))
                  for label, href in NAV]),
    ])


def _tile(tile_id: str, label: str, value: str, detail: str = "", tone: str = "") -> html.Div:
    return html.Div(className=f"tile {tone}".strip(), id=tile_id, children=[
        html.Div(label, className="tile-label"),
        html.Div(value, className="tile-value"),
        html.Div(detail, className="tile-detail"),
    ])


def node_href(node: str, gpu: int | None = None, rng: str | None = None,
              cluster: str | None = None) -> str:
    """The node page's address; the name quoted whole (a ``/``, ``?`` or ``#`` in it
    stays part of the name), ``cluster`` its cluster (node names repeat across clusters:
    without one, a name in several opens a page that lists them), ``gpu`` the GPU to bring
    forward, ``rng`` the time range (a key of ``timerange.RANGES``; None: the node page's
    default)."""
    params = (([("cluster", cluster)] if cluster else []) + ([("range", rng)] if rng else [])
              + ([("gpu", str(gpu))] if gpu is not None else []))
    return f"/node/{quote(node, safe='')}" + ("?" + urlencode(params) if params else "")


def job_href(job: str, cluster: str | None = None, rng: str | None = None) -> str:
    """The job page's address: the id quoted whole, ``cluster`` where the id is in several,
    ``rng`` a key of ``timerange.RANGES`` (None: the job's own span)."""
    params = ([("cluster", cluster)] if cluster else []) + ([("range", rng)] if rng else [])
    return f"/job/{quote(job, safe='')}" + ("?" + urlencode(params) if params else "")


def no_data_text(view: FleetView, now_s: float) -> str:
    """The one sentence a fleet page with no fresh GPU shows, everywhere on it."""
    if view.last_ms is None:
        return NO_DATA
    return (f"No fresh data: no GPU has reported since {clock(view.last_ms / 1000)} UTC "
            f"({ago(view.last_ms / 1000, now_s)}): the collectors stopped, or the processor "
            "is behind (as `fleetwatch up` is while it catches up after a start). "
            "Alerts below are as the last data left them.")


def summary(view: FleetView, now_s: float) -> list[html.Div]:
    """GPUs reporting, the hottest GPU, alerts firing and pending, data age.

    With no fresh data the alert tiles say "as of" the last data instead of
    "all clear" or a bare count: one truth per screen.
    """
    hot = view.hottest
    nodes = view.nodes  # (cluster, node): node001 of two clusters is two nodes
    firing, pending = view.count("firing"), view.count("pending")
    critical = sum(1 for a in view.alerts if a.state == "firing" and a.severity == "critical")
    hot_alert = hot is not None and any(
        (a.cluster, a.node) == hot.place and gpu_index(a.device) == hot.gpu
        for a in view.alerts)
    newest, ahead = view.as_of(now_s)
    if not view.cells:
        last = newest
        stale = f"as of {clock(last / 1000)} UTC, no data since" if last else "no data yet"
        return [
            _tile("summary-reporting", "GPUs reporting", "0",
                  f"none since {clock(last / 1000)} UTC" if last else "none yet", "warn"),
            _tile("summary-hottest", "Hottest GPU", "n/a", "no fresh data"),
            _tile("summary-firing", "Alerts firing", str(firing) if last or firing else "n/a",
                  stale, "bad" if firing else ""),
            _tile("summary-pending", "Alerts pending", str(pending) if last or pending else "n/a",
                  stale, "warn" if pending else ""),
            _tile("summary-asof", "Data as of", clock(last / 1000) if last else "n/a",
                  f"UTC · {ago(last / 1000, now_s)}" if last else "no samples", "warn"),
        ]
    return [
        _tile("summary-reporting", "GPUs reporting", str(len(view.reporting)),
              f"on {nodes} node{'s' if nodes != 1 else ''}"
              + (f" · {len(view.silent)} node{'s' * (len(view.silent) != 1)} silent"
                 if view.silent else ""), "warn" if view.silent else ""),
        _tile("summary-hottest", "Hottest GPU", fmt(TEMP, hot.temp_c) if hot else "n/a",
              f"{node_label(hot.cluster, hot.node, view.many_clusters)} · GPU {hot.gpu}"
              if hot else "", "bad" if hot_alert else ""),
        _tile("summary-firing", "Alerts firing", str(firing),
              f"{critical} critical" if firing else "all clear", "bad" if firing else "good"),
        _tile("summary-pending", "Alerts pending", str(pending), "waiting out their for-time",
              "warn" if pending else ""),
        _tile("summary-asof", "Data as of", clock(newest / 1000) if newest else "n/a",
              (f"UTC · {ago(newest / 1000, now_s)}" if newest else "no samples")
              + (f" · {ahead} GPU{'s' if ahead != 1 else ''} stamped after now: a node's "
                 "clock runs ahead" if ahead else ""), "warn" if ahead else ""),
    ]


def last_read(view: FleetView, now_s: float) -> dict[str, Any]:
    """What the fleet page keeps of a read that worked (in a ``dcc.Store``), to say how old
    its data are when the store stops answering."""
    return {"read_s": now_s, "newest_ms": view.as_of(now_s)[0],
            "firing": view.count("firing"), "pending": view.count("pending")}


def unavailable_summary(last: Mapping[str, Any] | None, now_s: float) -> list[html.Div]:
    """The summary while the store does not answer: nothing counted as if it were now (no
    "all clear"), the counts of the last read that worked and the data's age, growing."""
    gone = "store not answering"
    at = (f"at the last read, {clock(last['read_s'])} UTC" if last else "no read yet")
    newest = (last or {}).get("newest_ms")
    return [
        _tile("summary-reporting", "GPUs reporting", "n/a", f"{gone}: {at}", "warn"),
        _tile("summary-hottest", "Hottest GPU", "n/a", gone),
        _tile("summary-firing", "Alerts firing", "n/a",
              f"{last['firing']} {at}" if last else gone, "warn"),
        _tile("summary-pending", "Alerts pending", "n/a",
              f"{last['pending']} {at}" if last else gone, "warn"),
        _tile("summary-asof", "Data as of", clock(newest / 1000) if newest else "n/a",
              f"UTC · {ago(newest / 1000, now_s)} · {gone}" if newest else gone, "warn"),
    ]


def failed_stamp(now_s: float) -> str:
    """The page's stamp when its refresh found the store not answering."""
    return f"store not answering at {clock(now_s)} UTC"


def _device(a: Alert) -> str:
    index = gpu_index(a.device)
    return f"GPU {index}" if index is not None else a.device


# The resolved table shows this many (the newest); the rest are one command away.
RESOLVED_SHOWN = 50
# The active tables show this many (firing first, critical first, as they are sorted): in a
# storm a row per alert was 2 MB a refresh (1,050 alerts) and a browser pinned for minutes.
ACTIVE_SHOWN = 100


def left_out(alerts: Sequence[Alert]) -> str:
    """The line under a capped active table: how many more, of which rules, and where to
    read them all."""
    rules = Counter(a.rule for a in alerts).most_common()
    named = ", ".join(f"{n:,} {rule}" for rule, n in rules[:4])
    others = sum(n for _, n in rules[4:])
    return (f"and {len(alerts):,} more active: {named}"
            + (f", {others:,} of {len(rules) - 4} other rules" if others else "")
            + " · `fleetwatch alerts` lists them all, `fleetwatch alerts --node NODE` one "
            "node's; a node's page shows its own")


def evidence_text(a: Alert) -> str:
    """What the alert's value means: its evidence with the unit in each name, as
    ``fleetwatch alerts`` prints it (``temp_c=96, slowdown_c=87``; a time, such as an XID's
    ``xid_48_first_ts``, in UTC). The bare value only when the rule left no evidence: a
    throttle bitmask is not a temperature."""
    ident = board_text(a)
    if a.evidence:
        return ", ".join([f"{k}={evidence_value(k, v, '.4g')}" if isinstance(v, (int, float))
                          else f"{k}={v}"
                          for k, v in sorted(a.evidence.items())] + ([ident] if ident else []))
    return f"value={a.value:.4g}" + (f", {ident}" if ident else "")


def notes(alerts: Sequence[Alert], silences: Sequence[Silence],
          acks: Mapping[str, Acknowledgement], now_s: float) -> dict[str, str]:
    """Why each open alert is not notified ("acknowledged by ana", "silenced by ID",
    "inhibited by ID"), decided as ``fleetwatch alerts`` decides it (``alert_view.record``);
    alerts with nothing to say are left out."""
    open_alerts = [a for a in alerts if a.state != "resolved"]
    out = {}
    for a in open_alerts:
        r = alert_view.record(a, open_alerts, silences, acks, now_s)
        kind, _, who = str(r["muted"]).partition(":")
        said = {"silence": f"silenced by {who}", "inhibited": f"inhibited by {who}",
                "ack": f"acknowledged by {who}"}.get(kind, "")
        if r["acked_by"] and kind != "ack":
            said = "; ".join(x for x in (said, f"acknowledged by {r['acked_by']}") if x)
        if said:
            out[a.id] = said
    return out


def record_notes(alerts: Sequence[Alert], acks: Mapping[str, Acknowledgement],
                 notified: Mapping[str, Sequence[Notification]], now_s: float,
                 muted: Mapping[str, str] | None = None) -> dict[str, str]:
    """Per alert, what the store recorded: its acknowledgement (who, when, why) where
    ``muted`` (``notes``) does not already say it, and what was notified at each sink
    (``sink_records``), joined to ``muted``'s note."""
    out = dict(muted or {})
    for a in alerts:
        said = [out[a.id]] if a.id in out else []
        ack = acks.get(a.id)
        if ack is not None and not any("acknowledged" in x for x in said):
            said.append(f"acknowledged by {ack.by} at {stamp(ack.ts, now_s)} UTC"
                        + (f": {ack.comment}" if ack.comment else ""))
        elif ack is not None:
            said = [x.replace(f"acknowledged by {ack.by}", f"acknowledged by {ack.by} at "
                              f"{stamp(ack.ts, now_s)} UTC" + (f": {ack.comment}"
                                                              if ack.comment else ""))
                    for x in said]
        sent = sink_records(notified.get(a.id, ()), now_s)
        if sent:
            said.append("notified: " + sent)
        if said:
            out[a.id] = "; ".join(said)
    return out


# Per sink, at most this many records are shown: the first, then the last ones.
SINK_RECORDS_SHOWN = 4


def sink_records(records: Sequence[Notification], now_s: float) -> str:
    """One alert's notification records, per sink (``; `` between sinks), each with what
    muted it (the silence's id): repeats of one outcome in a row said once with their count,
    and of a long record the first and the last ``SINK_RECORDS_SHOWN - 1``, so a review sees
    the silence that muted it and what each sink got at the end."""
    by_sink: dict[str, list[tuple[Notification, int]]] = {}
    for n in sorted(records, key=lambda r: r.ts):
        runs = by_sink.setdefault(n.sink, [])
        if runs and (runs[-1][0].state, runs[-1][0].outcome, runs[-1][0].muted_by) == (
                n.state, n.outcome, n.muted_by):
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((n, 1))
    parts = []
    for runs in by_sink.values():
        said = [f"{n.state} {outcome_text(n)}{f' ({n.muted_by})' if n.muted_by else ''} "
                f"{stamp(n.ts, now_s)}{f' ({k} times)' if k > 1 else ''}" for n, k in runs]
        if len(said) > SINK_RECORDS_SHOWN:
            kept = SINK_RECORDS_SHOWN - 1
            said = [said[0], f"… {len(said) - 1 - kept} more", *said[-kept:]]
        parts.append(", ".join(said))
    return "; ".join(parts)


def _since(a: Alert, since: float, now_s: float, ended: float | None) -> Any:
    if a.state == "resolved" and a.resolved_ts:
        # Since when it fired, and apart when it ended: the end alone read as its start.
        return [f"{stamp(since, now_s)} UTC", html.Div(
            f"ended {stamp(a.resolved_ts, now_s)} UTC · {ago(a.resolved_ts, now_s)}",
            className="ended-at panel-hint")]
    if ended is None or a.state == "resolved":
        return f"{stamp(since, now_s)} UTC · {ago(since, now_s)}"
    return [f"{alert_view.utc(since)} UTC", html.Div(
        f"open when the data ended, {ago(ended, now_s)}; last evidence "
        f"{alert_view.hms(a.updated_ts, ended)}", className="ended-note panel-hint")]


def ended_notice(ended: float | None, now_s: float, notice_id: str) -> html.Div | None:
    """The banner over open alerts that the data left open, if the data ended."""
    if ended is None:
        return None
    return notice(f"No data since {alert_view.utc(ended)} UTC ({ago(ended, now_s)}): open "
                  "alerts are as the data left them (a replay store, `fleetwatch up` still "
                  "catching up, or the collectors or processor stopped)", notice_id)


def alert_table(alerts: Sequence[Alert], now_s: float, table_id: str,
                empty: str = "No active alerts", link_nodes: bool = True,
                rng: str | None = None, muted: Mapping[str, str] | None = None,
                more: str = "", ended: float | None = None,
                limit: int | None = None, clusters: bool | None = None) -> html.Div:
    """Alerts as a table, in the order given; the message links to the GPU on its node's
    page (over time range ``rng``; a rack's alert, of no node, has no link). One link per
    row and plain text elsewhere: a table of hundreds of rows stays light for the browser.
    ``muted``: alert id -> why it is not notified (``notes``); ``more``: a last line for the
    alerts left out; ``ended``: when the store's data ended (``alert_view.data_end``), if they
    did: an open alert is then open as they left it, not "now"; ``limit``: at most this many
    rows, and a line for the rest (``left_out``); ``clusters``: whether a Cluster column
    is shown (None: where the alerts are of more than one cluster: node001 GPU 3 of two
    clusters are two rows that only the cluster tells apart)."""
    if clusters is None:
        clusters = len({a.cluster for a in alerts}) > 1
    if not alerts:
        return html.Div(empty, className="empty-note", id=f"{table_id}-empty")
    if limit is not None and len(alerts) > limit:
        more = "; ".join(x for x in (left_out(alerts[limit:]), more) if x)
        alerts = alerts[:limit]
    head = html.Tr([html.Th(h) for h in
                    ("State", "Severity", "Rule", *(("Cluster",) if clusters else ()), "Node",
                     "GPU", "Since", "Message", "Action", "Id")])
    rows = []
    muted = muted or {}
    for a in alerts:
        # As `fleetwatch alerts` and Alertmanager's startsAt: a firing alert since it fired.
        # A resolved one since it fired too (pending only: since it started), its end apart.
        since = a.fired_ts if a.state != "pending" and a.fired_ts is not None else a.started_ts
        note = muted.get(a.id, "")
        message: list = [a.message or a.rule]  # text: React escapes whatever an agent sent
        if link_nodes and a.node:  # a rack's alert has no node page to open
            message = [dcc.Link(message[0], href=node_href(a.node, gpu_index(a.device), rng,
                                                           a.cluster or None),
                                className="row-link node-link")]
        evidence: list = [evidence_text(a)]
        for job in alert_jobs(a):  # each job it names (a shared GPU's), on its job page
            evidence += [" · ", dcc.Link(f"job {job}", href=job_href(job, a.cluster or None),
                                         className="job-link")]
        message.append(html.Div(evidence, className="evidence panel-hint"))
        if a.resolution:  # how it ended, apart from what it fired with
            message.append(html.Div(f"resolution: {a.resolution}",
                                    className="resolution panel-hint"))
        rows.append(html.Tr(className=f"alert-row state-{a.state}", **{
            "data-node": a.node, "data-cluster": a.cluster, "data-device": a.device,
            "data-state": a.state,
            "data-id": a.id}, children=[
            html.Td([html.Span(a.state, className=f"badge badge-{a.state}")]
                    + ([html.Div(note, className="muted-note panel-hint")] if note else []),
                    className="state"),
            html.Td(a.severity, className=f"sev sev-{a.severity}"),
            html.Td(a.rule, className="rule"),
            *([html.Td(a.cluster, className="cluster")] if clusters else []),
            html.Td(a.node, className="node"),
            html.Td(_device(a), className="device"),
            html.Td(_since(a, since, now_s, ended), className="since",
                    title=f"pending from {stamp(a.started_ts, now_s)} UTC" + (
                        f", fired {stamp(a.fired_ts, now_s)} UTC"
                        if a.fired_ts is not None else "")),
            html.Td(message, className="message"),
            html.Td(a.action, className="action"),  # what the rule suggests doing
            # What `fleetwatch ack` takes: shown whole, selectable in one go.
            html.Td(html.Code(a.id, style={"userSelect": "all"}), className="alert-id"),
        ]))
    if more:
        rows.append(html.Tr(html.Td(more, colSpan=10 if clusters else 9,
                                    className="panel-hint"),
                            className="more-row"))
    return html.Div(html.Table([html.Thead(head), html.Tbody(rows)], className="alerts"),
                    id=table_id, className="alerts-wrap")


def notice(text: str, notice_id: str = "notice") -> html.Div:
    """A banner for what the page cannot show: no data yet, store away."""
    return html.Div(text, id=notice_id, className="notice")


# A page "now" this far behind the wall clock is `up`'s simulated clock catching up (it is
# never ahead, and keeps wall time once caught up): said beside the stamp.
SIMULATED_LAG_S = 10.0


def updated_stamp(now_s: float | None = None, wall_s: float | None = None) -> str:
    """The page's refresh time; marked while it is simulated and behind the wall clock,
    since the alert ages on the page count from it too."""
    wall = time.time() if wall_s is None else wall_s
    now = wall if now_s is None else now_s
    stamp = f"refreshed {clock(now)} UTC"
    behind = wall - now
    if behind > SIMULATED_LAG_S:
        stamp += (f" · simulated time, catching up ({_behind(behind)} behind the wall clock; "
                  "ages count from it)")
    return stamp


def _behind(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def panel(title: str, hint: str, *body: Any) -> html.Section:
    """A page's panel: a title, a grey hint beside it, then its body."""
    return html.Section(className="panel", children=[
        html.Div(className="panel-head", children=[
            html.H2(title), html.Span(hint, className="panel-hint")]),
        *body])
