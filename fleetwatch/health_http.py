"""The processor's HTTP port: ``/metrics``, ``/healthz``, ``/readyz``, and 404 for the rest.

prometheus-client's own server answered its metrics page on every path, so a probe of
``/healthz`` or ``/ready`` always said yes (deploy finding 4, r22). Here ``/healthz`` says
the process answers (a liveness probe: a store or broker outage must not restart it),
``/readyz`` says whether it can do its work now (``ready()`` gives "" or the reason it
cannot: 503 with that reason), ``/metrics`` is prometheus-client's page as before (its
content negotiation and compression kept), anything else is 404.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

PATHS = ("/metrics", "/healthz", "/readyz")


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Not a line per scrape or probe."""


def health_app(registry: CollectorRegistry, ready: Callable[[], str]) -> Callable[..., Any]:
    """The WSGI application of the port."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/healthz":
            return _text(start_response, "200 OK", "ok")
        if path == "/readyz":
            reason = ready()
            return (_text(start_response, "503 Service Unavailable", f"not ready: {reason}")
                    if reason else _text(start_response, "200 OK", "ready"))
        return _text(start_response, "404 Not Found",
                     f"not found; this port serves {', '.join(PATHS)}")

    return app


def _text(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    body = (text + "\n").encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
    return [body]


def serve(host: str, port: int, registry: CollectorRegistry,
          ready: Callable[[], str]) -> WSGIServer:
    """The port served from a daemon thread; ``shutdown()`` and ``server_close()`` end it.
    Binding errors (a port in use) are raised here, as prometheus-client's were."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = info[0]

    class Server(_Server):
        address_family = family

    server = make_server(address[0], port, health_app(registry, ready), Server,
                         handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
