"""The Dash app: a shell with a ``dcc.Location`` router and one module per page.

A router rather than ``dash.register_page``: pages there live in a global,
per-process registry, while ``create_app`` must be able to build several apps
(tests, one per store) in one process. Every callback reads through the
``Store`` it was given at call time, so the app follows a store that another
thread or process is writing.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import unquote

import dash
from dash import Input, Output, State, dcc, html

from fleetwatch.carbon import CarbonModel
from fleetwatch.dashboards import (
    alerts,
    components,
    energy,
    fleet,
    node,
    timerange,
    utilization,
)
from fleetwatch.dashboards.components import SHOWN, address
from fleetwatch.pipeline.store.base import Store

_INDEX = """<!DOCTYPE html>
<html>
<head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>STYLE</style></head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body>
</html>"""

log = logging.getLogger(__name__)


def _page(pathname: str | None, refresh_s: float, search: str | None = None,
          render_energy: energy.Render | None = None) -> html.Div:
    path = pathname or "/"
    if path.rstrip("/") == energy.PATH:
        return energy.layout(refresh_s, search, render_energy)
    if path.rstrip("/") == utilization.PATH:
        return utilization.layout(refresh_s, search)
    if path in (fleet.PATH, ""):
        return fleet.layout(refresh_s, search)
    if path.rstrip("/") == alerts.PATH:
        return alerts.layout(refresh_s, search)
    if path.startswith(node.PREFIX) and len(path) > len(node.PREFIX):
        return node.layout(unquote(path[len(node.PREFIX):].strip("/")), refresh_s,
                           node.focus_of(search),
                           timerange.parse(search, node.DEFAULT_RANGE).range)
    return html.Div(className="page", children=[
        html.H1("Not found"),
        html.P([f"No page at {path}. ", dcc.Link("Back to the fleet", href="/")]),
    ])


def create_app(store: Store, refresh_s: float = 5.0, title: str = "fleetwatch", *,
               clock: Callable[[], float] = time.time,
               temp_limit_c: float | None = None,
               carbon: CarbonModel | None = None) -> dash.Dash:
    """The dashboard over ``store``, refreshing every ``refresh_s`` seconds.

    ``clock`` gives "now" in epoch seconds: tests and replays pass their own.
    ``temp_limit_c``: the site's temperature limit (detectors.site_temp_limit_c), drawn as a
    line on node charts; without one, the GPUs' slowdown temperature.
    """
    if refresh_s <= 0:
        raise ValueError(f"refresh_s must be positive, got {refresh_s}")
    app = dash.Dash(__name__, title=title, update_title=None,
                    suppress_callback_exceptions=True, serve_locally=True)
    style = resources.files("fleetwatch.dashboards").joinpath("style.css").read_text("utf-8")
    app.index_string = _INDEX.replace("STYLE", style)
    shell = html.Div(className="shell", children=[
        # callback-nav: a callback that sets the path (a heatmap click) navigates
        # without reloading the page, like a dcc.Link does.
        dcc.Location(id="url", refresh="callback-nav"),
        dcc.Store(id=SHOWN),
        components.header(title),
        html.Main(id="page"),
    ])
    app.layout = shell
    # Every page's components, so Dash can check the callbacks of pages not shown yet.
    app.validation_layout = html.Div([shell, fleet.layout(refresh_s), alerts.layout(refresh_s),
                                      node.layout("", refresh_s), energy.layout(refresh_s),
                                      utilization.layout(refresh_s)])

    @app.callback(Output("page", "children"),
                  *[Output(components.nav_id(label), "className") for label, _ in components.NAV],
                  Output(SHOWN, "data"),
                  Input("url", "pathname"), Input("url", "search"), State(SHOWN, "data"))
    def route(pathname: str | None, search: str | None, shown: list | None
              ) -> tuple[Any, ...]:
        # The query is listened to, so that Back and Forward show what the address says;
        # a range picker that rewrote the address also wrote SHOWN (``shown``): the page
        # already shows it, and is not drawn again.
        if shown == address(pathname, search):
            raise dash.exceptions.PreventUpdate
        return (_page(pathname, refresh_s, search, render_energy),
                *components.nav_classes(pathname), address(pathname, search))

    for page in (fleet, alerts):
        page.register(app, store, clock)
    node.register(app, store, clock, temp_limit_c)
    utilization.register(app, store, clock)
    render_energy = energy.register(app, store, clock, carbon or _default_carbon())
    return app


def _default_carbon() -> CarbonModel:
    from fleetwatch.carbon import model_from_config
    from fleetwatch.config import CarbonConfig, EnergyConfig

    return model_from_config(CarbonConfig(), EnergyConfig())


def serve(store: Store, host: str = "127.0.0.1", port: int = 8050,
          refresh_s: float = 5.0, sock: socket.socket | None = None,
          temp_limit_c: float | None = None, carbon: CarbonModel | None = None,
          until: threading.Event | None = None) -> None:
    """Serve the dashboard on waitress (a production WSGI server) until ``until`` is
    set (checked twice a second; a signal handler sets it) or, without one, until
    Ctrl-C.

    ``sock``: a socket already bound (``fleetwatch up`` takes the port before
    it touches any store, so a busy port stops it with nothing written).
    """
    from waitress import wasyncore
    from waitress.server import create_server

    app = create_app(store, refresh_s=refresh_s, temp_limit_c=temp_limit_c, carbon=carbon)
    where = {"sockets": [sock]} if sock is not None else {"host": host, "port": port}
    channels: dict = {}  # waitress's socket map: the listening socket and each connection
    server = create_server(app.server, map=channels, threads=8, ident="fleetwatch", **where)
    log.info("dashboard on http://%s:%d/", host, port)
    if until is None:
        server.run()  # until KeyboardInterrupt, which waitress catches
        return
    try:
        while channels and not until.is_set():
            wasyncore.loop(timeout=0.5, map=channels, count=1)
    finally:
        server.task_dispatcher.shutdown()
        wasyncore.close_all(channels)
