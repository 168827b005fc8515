"""HTML pieces every page shares: the header and its nav, times as the pages write them,
the pages' addresses (node and job links, the range and cluster in the query), the range
and cluster pickers, kept zoom, banners, panels and the refresh stamp.

The fleet page's summary strip is ``summary_strip``; alert tables are ``alert_tables``.
Pure functions of records (and ``now`` for "5 min ago"), so the pages' text
is tested without a browser.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

import dash
from dash import Input, Output, State, dcc, html

from fleetwatch.dashboards import timerange
from fleetwatch.dashboards.figures import zoom_after

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


def failed_stamp(now_s: float) -> str:
    """The page's stamp when its refresh found the store not answering."""
    return f"store not answering at {clock(now_s)} UTC"


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
