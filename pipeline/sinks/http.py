"""The sinks' HTTP requests, with the standard library, their failures told apart.

* A ``user:password@`` in a sink URL is sent as HTTP basic auth (``ServerURL``, as for
  the store), never to where a redirect leads; every message names the URL as
  ``fleetwatch config`` shows it (the password masked, a webhook's path too).
* ``timeout_s`` (``alerts.sink_timeout_s``) bounds the whole request: connect, send, and
  the answer's status line, headers and body. urllib's own timeout is per socket
  operation, so a receiver that drips a byte every few seconds would hold the sink for
  ever; a timer shuts the request's socket down at the deadline.
* An answer is read up to a bound: ``ANSWER_LIMIT`` (the part of a 2xx answer to a POST
  past it is left unread: the receiver took the alerts), ``ERROR_TEXT_LIMIT`` of an
  error's text, and a caller's own (Alertmanager's silence list), past which it is an error.
* Any failure to get a complete answer (unreachable, reset, an answer that is not HTTP, a
  body cut short, TLS, the deadline), 5xx and 429 are ``SinkError``: tried again, then
  held. 401, 403 and a proxy's 407 are ``SinkUnauthorized`` (a ``SinkError``): the
  credentials in the sink's setting (or the proxy's) are wrong until someone fixes them,
  so its changes are held, not dropped; the message names the setting to check. Any other
  answer that is not 2xx (400, 404, 413, 422) is ``SinkRejected``: never retried.
* A redirect (any 3xx) is never followed, for any method: urllib would turn a POST that
  meets a 301, 302 or 303 into a GET without its body, and the 200 of the page it leads
  to would count the alerts as delivered. Following only 307 and 308 (which keep the
  method and body) would still send the alerts, and the basic auth that must not follow,
  to wherever the answer says, at every request. ``SinkRedirected`` (a ``SinkError``)
  names the ``Location`` and the setting to set to it: held like an outage, and counted
  as a failure at once, until the URL is the final one.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from fleetwatch.pipeline.server_url import ServerURL, masked_url
from fleetwatch.pipeline.sinks.base import (
    SinkError,
    SinkRedirected,
    SinkRejected,
    SinkUnauthorized,
)

__all__ = ["ANSWER_LIMIT", "ERROR_TEXT_LIMIT", "SILENCES_LIMIT", "ServerURL", "post_json",
           "redirected", "request", "unauthorized"]

ANSWER_LIMIT = 64 << 10        # bytes of any answer read
ERROR_TEXT_LIMIT = 2000        # bytes of an error answer's text read
QUOTE_CHARS = 300              # ... and quoted in a message, on one line
SILENCES_LIMIT = 32 << 20      # Alertmanager's GET /api/v2/silences: every silence it has
_READ = 64 << 10


def post_json(url: ServerURL | str, body: Any, timeout_s: float, what: str,
              setting: str = "", headers: Mapping[str, str] | None = None) -> None:
    """POST ``body``; ``SinkError`` for no complete answer within ``timeout_s``, 5xx or
    429, ``SinkUnauthorized`` for 401, 403 or 407 (naming ``setting``, the config key of
    the URL, to check), ``SinkRejected`` for any other answer that is not 2xx (its text in
    the message)."""
    server = url if isinstance(url, ServerURL) else ServerURL.of(url)
    status, text, _ = request(server, "POST", json.dumps(body).encode(), timeout_s, what,
                              setting=setting, headers=headers)
    if status >= 300:
        said = _quoted(text)
        if status in AUTH_STATUSES:
            raise unauthorized(server, status, text, what, setting)
        if status >= 500 or status == 429:
            raise SinkError(f"{what} {server.shown} answered {status}{said}")
        raise SinkRejected(f"{what} {server.shown} refused the alerts ({status}){said}")


# The answers that refuse fleetwatch's credentials, not its alerts.
AUTH_STATUSES = frozenset({401, 403, 407})


def unauthorized(server: ServerURL, status: int, text: bytes, what: str,
                 setting: str = "") -> SinkUnauthorized:
    """The error for a 401, 403 or 407 answer: what refused whom, and what to check."""
    said = _quoted(text).removeprefix(": ")
    code = f"{status}: {said}" if said else str(status)
    where = setting or "the sink's URL"
    if status == 407:
        return SinkUnauthorized(
            f"{what} {server.shown} a proxy on the way asked for credentials ({code}): check "
            "the user:password of the proxy in fleetwatch's https_proxy/http_proxy")
    refused = "refused fleetwatch access" if status == 403 else (
        "refused fleetwatch's credentials")
    return SinkUnauthorized(f"{what} {server.shown} {refused} ({code}): check the "
                            f"user:password in {where}")


def redirected(server: ServerURL, status: int, location: str | None, what: str,
               setting: str = "") -> SinkRedirected:
    """The error for a 3xx answer: where it points (masked as the URL is), and what to set."""
    where = setting or "the sink's URL"
    if not location:
        return SinkRedirected(f"{what} {server.shown} answered {status} (a redirect, with no "
                              f"Location): not followed, alerts not delivered; check {where}")
    target = masked_url(urllib.parse.urljoin(server.base, location), server.secret_path)
    return SinkRedirected(
        f"{what} {server.shown} answered {status}, a redirect to {target}: not followed "
        f"(a redirected POST loses its alerts), alerts not delivered; set {where} to the "
        "final URL")


def _quoted(text: bytes) -> str:
    """An error answer's text as a message quotes it: ": TEXT" on one line (an HTML error
    page's line breaks and indentation collapsed), at most ``QUOTE_CHARS`` of it, or "" if
    it has none."""
    quoted = " ".join(text[:ERROR_TEXT_LIMIT].decode("utf-8", "replace").split())
    if len(quoted) > QUOTE_CHARS:
        quoted = quoted[:QUOTE_CHARS - 1] + "…"
    return f": {quoted}" if quoted else ""


def request(server: ServerURL, method: str, data: bytes | None, timeout_s: float, what: str,
            limit: int = ANSWER_LIMIT, setting: str = "",
            headers: Mapping[str, str] | None = None) -> tuple[int, bytes, bool]:
    """One request, all of it within ``timeout_s``: (status, the answer's first ``limit``
    bytes, whether that is all of it; of an answer that is not 2xx, its first
    ``ERROR_TEXT_LIMIT`` bytes, whatever came of them). ``SinkError`` when no complete
    answer came; ``SinkRedirected`` for a 3xx (not followed; ``setting`` named)."""
    sent = {"Content-Type": "application/json"} if data is not None else {}
    sent.update(headers or {})
    req = urllib.request.Request(server.base, data, sent, method=method)
    for name, value in server.basic_header().items():
        req.add_unredirected_header(name, value)  # not to where a redirect leads
    deadline = _Deadline(timeout_s)
    opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline),
                                         _NoRedirect())
    try:
        with deadline:
            try:
                resp = opener.open(req, timeout=timeout_s)
            except urllib.error.HTTPError as exc:
                with exc:
                    if 300 <= exc.code < 400:
                        raise redirected(server, exc.code, exc.headers.get("Location"),
                                         what, setting) from None
                    return exc.code, _error_text(exc), True
            with resp:
                text, whole = _read(resp, limit)
                return resp.status, text, whole
    except urllib.error.URLError as exc:
        if deadline.passed:
            raise SinkError(f"{what} {server.shown} {deadline.said()}") from exc
        raise SinkError(f"{what} {server.shown} unreachable: {exc.reason}") from exc
    except http.client.InvalidURL:
        # Its text quotes the URL, a webhook's secret path included: not repeated here.
        raise SinkRejected(f"{what} {server.shown}: not a URL that can be requested (a "
                           "control character or a port that is no number?)") from None
    except (http.client.HTTPException, OSError) as exc:
        # Reached, but the answer is no HTTP (BadStatusLine), ends early (IncompleteRead,
        # RemoteDisconnected, a reset), or TLS failed in it: the receiver may be fine next time.
        said = deadline.said() if deadline.passed else (
            f"gave no complete answer: {type(exc).__name__}: {exc}")
        raise SinkError(f"{what} {server.shown} {said}") from exc


def _read(resp: http.client.HTTPResponse, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of the answer, and whether that was all of it; an answer that
    ends before its ``Content-Length`` raises ``IncompleteRead`` (``read(n)`` does not)."""
    chunks: list[bytes] = []
    got = 0
    while got <= limit:
        chunk = resp.read(min(_READ, limit + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    text = b"".join(chunks)
    if got > limit:
        return text[:limit], False
    if resp.length:  # what Content-Length promised and did not come
        raise http.client.IncompleteRead(text, resp.length)
    return text, True


def _error_text(exc: urllib.error.HTTPError) -> bytes:
    """What came of an error answer's text: its status says what matters."""
    try:
        return _read(exc.fp, ERROR_TEXT_LIMIT)[0] if exc.fp is not None else b""  # type: ignore[arg-type]
    except (http.client.HTTPException, OSError, ValueError) as read_exc:
        return f"(its text cut short: {type(read_exc).__name__})".encode()


class _Deadline:
    """Shuts the request's connections down once ``timeout_s`` has passed, which fails
    whatever read or write is under way on them (a context: the timer runs inside it)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.passed = False
        self._conns: list[http.client.HTTPConnection] = []
        # urllib drops the connection's socket once the headers are in (the answer reads
        # on through its own file of it): kept here to be shut down mid-body.
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def said(self) -> str:
        return f"gave no complete answer within {self.timeout_s:g}s (alerts.sink_timeout_s)"

    def watch(self, conn: http.client.HTTPConnection) -> None:
        """Watch ``conn``: its socket is shut down at the deadline (a TLS handshake under
        way included), and one that connects after it is refused."""
        connect = conn.connect

        def connect_in_time() -> None:
            connect()
            with self._lock:
                if self.passed:
                    conn.close()
                    raise TimeoutError("connected after the deadline")
                if conn.sock is not None:
                    self._socks.append(conn.sock)

        conn.connect = connect_in_time  # type: ignore[method-assign]
        with self._lock:
            self._conns.append(conn)

    def _expire(self) -> None:
        with self._lock:
            self.passed = True
            # Connecting (no socket yet): its own timeout ends it, then connect_in_time.
            socks = [*self._socks, *(c.sock for c in self._conns if c.sock is not None)]
            for sock in socks:
                # socket's own shutdown, a TLS socket's too: no close_notify exchange with
                # a receiver that is not answering. One closed since: EBADF.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _watched(deadline: _Deadline, cls: type[http.client.HTTPConnection]) -> Any:
    def make(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
        conn = cls(*args, **kwargs)
        deadline.watch(conn)
        return conn
    return make


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed (see the module's doc): a 3xx is an ``HTTPError``."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_watched(self._deadline, http.client.HTTPConnection), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_watched(self._deadline, http.client.HTTPSConnection), req,
                            context=self._context)
