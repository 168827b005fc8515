"""An open page that keeps refreshing across a dashboard restart, and says while the
dashboard does not answer.

Each page's refresh callback disables the page's Interval while its request is out
(``running=``): Dash drops the answer of a request that a newer one superseded, so without
it a store slower than the refresh would never get its error onto the screen. Dash puts the
"finished" value back when the server answers anything, an error included, but not when the
request gets no answer at all (dash-renderer ``handleServerside``: its ``handleError``
rejects without ``completeJob``): with the dashboard stopped or restarting, the Interval stays
disabled and the page never asks again, still showing its last "refreshed … · 0 s ago".

``live.js`` (loaded with the page) notes each request to the dashboard that got no answer,
with the ids of its inputs, and whether the dashboard answers. A clientside callback on a
second Interval, never disabled, re-arms a page's tick whose request was lost, and shows a
banner with the time of the last answer while the dashboard is away. The same watch shows
``fresh``'s banner while the newest data on the page is stale (``fleetwatch.dashboards.fresh``),
and re-arms the shell's check of it after a lost request, as it does the page's tick.
"""

from __future__ import annotations

from importlib import resources

import dash
from dash import ClientsideFunction, Input, Output, State, dcc, html

from fleetwatch.dashboards import fresh

WATCH_MS = 1000  # how soon the page notices: a browser-side check, no request to the server


def script() -> str:
    """``live.js``, for the page's <head>: it must wrap ``fetch`` before the first callback."""
    return resources.files("fleetwatch.dashboards").joinpath("live.js").read_text("utf-8")


def parts(page: str) -> list[dcc.Interval | html.Div]:
    """The watch Interval and the banners of ``page`` (whose tick is ``{page}-tick``): the
    dashboard away, the data stale."""
    return [dcc.Interval(id=f"{page}-watch", interval=WATCH_MS),
            html.Div(id=f"{page}-offline", className="notice offline", hidden=True),
            html.Div(id=f"{page}-stale", className="notice stale", hidden=True)]


def register(app: dash.Dash, page: str) -> None:
    """The watch of ``page``: re-arms ``{page}-tick`` and the shell's freshness check after
    a lost request; the banners."""
    app.clientside_callback(
        ClientsideFunction("fleetwatch", "watch"),
        # The refresh callback's ``running`` writes the same property: a duplicate output.
        Output(f"{page}-tick", "disabled", allow_duplicate=True),
        Output(f"{page}-offline", "children"), Output(f"{page}-offline", "hidden"),
        Output(fresh.TICK, "disabled", allow_duplicate=True),
        Output(f"{page}-stale", "children"), Output(f"{page}-stale", "hidden"),
        Output(f"{page}-stale", "className"),
        Input(f"{page}-watch", "n_intervals"),
        State(f"{page}-tick", "id"), State(f"{page}-tick", "interval"),
        State(fresh.CHECK, "data"), State(fresh.TICK, "id"),
        prevent_initial_call=True)
