"""The Dash app: a shell with a ``dcc.Location`` router and one module per page.

A router rather than ``dash.register_page``: pages there live in a global,
per-process registry, while ``create_app`` must be able to build several apps
(tests, one per store) in one process. Every callback reads through the
``Store`` it was given at call time, so the app follows a store that another
thread or process is writing.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
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
    facility,
    fleet,
    fresh,
    job,
    live,
    node,
    timerange,
    utilization,
)
from fleetwatch.dashboards.components import SHOWN, address
from fleetwatch.dashboards.data import FALLBACK_SLOWDOWN_C
from fleetwatch.pipeline.store.base import Store
from fleetwatch.urls import http_url

_INDEX = """<!DOCTYPE html>
<html>
<head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>STYLE</style><script>LIVE</script></head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body>
</html>"""

log = logging.getLogger(__name__)


def _page(pathname: str | None, refresh_s: float, search: str | None = None,
          render_energy: energy.Render | None = None) -> html.Div:
    path = pathname or "/"
    if path.rstrip("/") == energy.PATH:
        return energy.layout(refresh_s, search, render_energy)
    if path.rstrip("/") == facility.PATH:
        return facility.layout(refresh_s, search)
    if path.rstrip("/") == utilization.PATH:
        return utilization.layout(refresh_s, search)
    if path in (fleet.PATH, ""):
        return fleet.layout(refresh_s, search)
    if path.rstrip("/") == alerts.PATH:
        return alerts.layout(refresh_s, search)
    if path.startswith(node.PREFIX) and len(path) > len(node.PREFIX):
        return node.layout(unquote(path[len(node.PREFIX):].strip("/")), refresh_s,
                           node.focus_of(search),
                           timerange.parse(search, node.DEFAULT_RANGE).range,
                           node.cluster_of(search))
    if path.startswith(job.PREFIX) and len(path.rstrip("/")) > len(job.PREFIX):
        cluster, rng = job.query_of(search)
        return job.layout(unquote(path[len(job.PREFIX):].rstrip("/")), refresh_s, cluster, rng)
    return html.Div(className="page", children=[
        html.H1("Not found"),
        html.P([f"No page at {path}. ", dcc.Link("Back to the fleet", href="/")]),
    ])


def create_app(store: Store, refresh_s: float = 5.0, title: str = "fleetwatch", *,
               clock: Callable[[], float] = time.time,
               temp_limit_c: float | None = None,
               carbon: CarbonModel | None = None,
               allowed_hosts: Sequence[str] = (),
               store_problem: Callable[[], str | None] | None = None,
               node_static_w: float = 0.0,
               fallback_slowdown_c: float = FALLBACK_SLOWDOWN_C,
               max_gap_s: float = 60.0) -> dash.Dash:
    """The dashboard over ``store``, refreshing every ``refresh_s`` seconds.

    ``clock`` gives "now" in epoch seconds: tests and replays pass their own.
    ``temp_limit_c``: the site's temperature limit (detectors.site_temp_limit_c), drawn as a
    line on node charts; without one, the GPUs' slowdown temperature.
    ``allowed_hosts``: the names besides loopback's it answers to (``HostCheck``).
    ``store_problem``: what the store's writer says is wrong with it (``fleetwatch up``'s
    processor: a full disk), shown over the fleet page (None: nothing known).
    ``node_static_w``: energy.node_static_w, the rest of a node in the facility page's power.
    ``fallback_slowdown_c``: detectors.fallback_slowdown_c, the limit drawn (as assumed) for
    GPUs that report no threshold and whose part's is not known.
    ``max_gap_s``: energy.max_gap_s; the energy page names the nodes silent longer.
    """
    if refresh_s <= 0:
        raise ValueError(f"refresh_s must be positive, got {refresh_s}")
    app = dash.Dash(__name__, title=title, update_title=None,
                    suppress_callback_exceptions=True, serve_locally=True)
    app.server.wsgi_app = Healthz(HostCheck(app.server.wsgi_app,  # type: ignore[method-assign]
                                           allowed_hosts))
    style = resources.files("fleetwatch.dashboards").joinpath("style.css").read_text("utf-8")
    app.index_string = _INDEX.replace("STYLE", style).replace("LIVE", live.script())
    shell = html.Div(className="shell", children=[
        # callback-nav: a callback that sets the path (a heatmap click) navigates
        # without reloading the page, like a dcc.Link does.
        dcc.Location(id="url", refresh="callback-nav"),
        dcc.Store(id=SHOWN),
        *fresh.parts(refresh_s),  # every page's check of how old its newest data is
        components.header(title),
        html.Main(id="page"),
    ])
    app.layout = shell
    # Every page's components, so Dash can check the callbacks of pages not shown yet.
    app.validation_layout = html.Div([shell, fleet.layout(refresh_s), alerts.layout(refresh_s),
                                      node.layout("", refresh_s), energy.layout(refresh_s),
                                      utilization.layout(refresh_s), job.layout("", refresh_s),
                                      facility.layout(refresh_s)])

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

    fleet.register(app, store, clock, store_problem)
    alerts.register(app, store, clock)
    node.register(app, store, clock, temp_limit_c, fallback_slowdown_c)
    utilization.register(app, store, clock)
    carbon = carbon or _default_carbon()
    render_energy = energy.register(app, store, clock, carbon, max_gap_s)
    job.register(app, store, clock, carbon)
    facility.register(app, store, clock, carbon, node_static_w)
    fresh.register(app, store, clock, refresh_s)
    for page in ("fleet", "alerts", "node", "util", "energy", "job", "facility"):
        live.register(app, page)
    return app


def _default_carbon() -> CarbonModel:
    from fleetwatch.carbon import model_from_config
    from fleetwatch.config import CarbonConfig, EnergyConfig

    return model_from_config(CarbonConfig(), EnergyConfig())


def _host_and_port(host: str) -> tuple[str, int | None]:
    """``name``, ``name:port``, ``[v6]`` or ``[v6]:port`` as (lower-case name, port or None)."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, sep, port = host.rpartition(":")
        if not sep or not port.isdigit():
            name, port = host, ""
    return name.rstrip("."), int(port) if port.isdigit() else None


def host_allowed(host: str | None, allowed: Iterable[str] = ()) -> bool:
    """Whether a request's ``Host`` header names this dashboard.

    Loopback names (``localhost``, 127.0.0.0/8, ``[::1]``) on any port: an SSH tunnel or a
    container may map the port, and a page can only send one of these by being served
    from loopback itself. Else one of ``allowed`` (dashboard.allowed_hosts): ``name`` on
    any port, ``name:port`` on that one. A page that DNS-rebinds its own name to 127.0.0.1
    sends that name, and is refused. No Host at all (HTTP/1.0, not a browser) is served.
    """
    if not host:
        return True
    name, port = _host_and_port(host)
    if name == "localhost":
        return True
    try:
        if ipaddress.ip_address(name).is_loopback:
            return True
    except ValueError:
        pass
    for entry in allowed:
        a_name, a_port = _host_and_port(entry)
        if name == a_name and a_port in (None, port):
            return True
    return False


class Healthz:
    """WSGI middleware: ``/healthz`` answers 200 "ok" from any Host (a probe's Host is the
    pod's address; it reveals nothing), without touching the store: the server's threads
    answer. Everything else goes to ``app``."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("PATH_INFO") != "/healthz":
            return self.app(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8"),
                                  ("Content-Length", "3")])
        return [b"ok\n"]


class HostCheck:
    """WSGI middleware: answers 421 to a request whose Host is not the dashboard's
    (``host_allowed``). The dashboard has no authentication, so it must not answer a
    page from another site that reached 127.0.0.1 by DNS rebinding (or through the
    operator's SSH tunnel) as if it were its own. Each refused Host is logged once."""

    MAX_LOGGED = 32  # distinct refused hosts logged; a flood of names is not logged forever

    def __init__(self, app: Callable[..., Any], allowed: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = tuple(allowed)
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        host = environ.get("HTTP_HOST")
        if host_allowed(host, self.allowed):
            return self.app(environ, start_response)
        self._say(str(host))
        body = (f"fleetwatch dashboard: Host {host!r} is not served here. Open it as "
                "http://localhost:<port>/ (or 127.0.0.1), or, behind a reverse proxy, add "
                "the name to dashboard.allowed_hosts.\n").encode()
        start_response("421 Misdirected Request", [("Content-Type", "text/plain; charset=utf-8"),
                                                   ("X-Content-Type-Options", "nosniff"),
                                                   ("Content-Length", str(len(body)))])
        return [body]

    def _say(self, host: str) -> None:
        with self._lock:
            if host in self._logged or len(self._logged) >= self.MAX_LOGGED:
                return
            self._logged.add(host)
            last = len(self._logged) == self.MAX_LOGGED
        log.warning("refused a request for Host %r (answered 421): the dashboard answers "
                    "only localhost, 127.0.0.1, [::1]%s, so that a web page cannot read it "
                    "by DNS rebinding. A reverse proxy that forwards this name: add it to "
                    "dashboard.allowed_hosts%s", host[:200],
                    f" and dashboard.allowed_hosts ({', '.join(self.allowed)})"
                    if self.allowed else "",
                    "; further refused hosts are not logged" if last else "")


def serve(store: Store, host: str = "127.0.0.1", port: int = 8050,
          refresh_s: float = 5.0, sock: socket.socket | None = None,
          temp_limit_c: float | None = None, carbon: CarbonModel | None = None,
          until: threading.Event | None = None, allowed_hosts: Sequence[str] = (),
          clock: Callable[[], float] = time.time,
          store_problem: Callable[[], str | None] | None = None,
          node_static_w: float = 0.0,
          fallback_slowdown_c: float = FALLBACK_SLOWDOWN_C, max_gap_s: float = 60.0) -> None:
    """Serve the dashboard on waitress (a production WSGI server) until ``until`` is
    set (checked twice a second; a signal handler sets it) or, without one, until
    Ctrl-C.

    ``sock``: a socket already bound (``fleetwatch up`` takes the port before
    it touches any store, so a busy port stops it with nothing written).
    ``allowed_hosts``: dashboard.allowed_hosts (``HostCheck``).
    ``clock``: "now" (``create_app``); ``fleetwatch up`` passes its simulated clock.
    """
    from waitress import wasyncore
    from waitress.server import create_server

    app = create_app(store, refresh_s=refresh_s, temp_limit_c=temp_limit_c, carbon=carbon,
                     allowed_hosts=allowed_hosts, clock=clock,
                     store_problem=store_problem, node_static_w=node_static_w,
                     fallback_slowdown_c=fallback_slowdown_c, max_gap_s=max_gap_s)
    where = {"sockets": [sock]} if sock is not None else {"host": host, "port": port}
    channels: dict = {}  # waitress's socket map: the listening socket and each connection
    server = create_server(app.server, map=channels, threads=8, ident="fleetwatch", **where)
    log.info("dashboard on %s", http_url(host, port))
    if until is None:
        server.run()  # until KeyboardInterrupt, which waitress catches
        return
    try:
        while channels and not until.is_set():
            wasyncore.loop(timeout=0.5, map=channels, count=1)
    finally:
        server.task_dispatcher.shutdown()
        wasyncore.close_all(channels)
