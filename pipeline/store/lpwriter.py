"""The line-protocol writer under ``InfluxStore``: requests to the InfluxDB v1 or v2 write
API, through influxdb-client, as ``store.influx_api`` says (see ``influx``'s docstring for
how "auto" finds it).

Writes are synchronous on purpose: the processor commits Kafka
offsets only after ``Store.write`` returns, so it must return only once the
server has answered 2xx for every line. influxdb-client's batching mode
returns at once and reports failures from a background thread, so it
cannot back that promise; we use its SYNCHRONOUS write API and do the
batching (about ``batch_lines`` per request) here. Retries are
``fleetwatch.retry``'s: the client's ``WritesRetry`` fixes its
``max_retry_time`` deadline when it is constructed and the synchronous path
takes no per-call retry, so a long-lived client would stop retrying after
its first ``max_retry_time``.

Answers are told apart: 5xx, 408, 429, timeouts and connection errors are
transient (retried, then ``StoreError``: the processor pauses and tries the
batch again later); 401, 403 and 404 say the store is misconfigured (token,
URL, database), not that the data is bad, so they are ``StoreError`` at once
(nothing is dead-lettered while an operator fixes it); any other 4xx is a
refusal of the data (``StoreRejected`` with the server's reason: the
processor bisects the batch and dead-letters the culprits). Before sending,
frames the server would drop without an error (outside its retention, or
too far ahead: ``window``) are refused by position.

A ``user:password@`` in the URL (VictoriaMetrics behind vmauth or a proxy's basic auth,
InfluxDB 1.x) is taken out of it (``ServerURL``) and sent as HTTP basic auth on every
request, writes and reads; messages name the URL with the password masked, as
``fleetwatch config`` shows it. ``store.token`` may then be empty or the same
``user:password``; any other token is a configuration error (one ``Authorization``
header cannot carry both).
"""

from __future__ import annotations

import base64
import logging
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from influxdb_client import InfluxDBClient, WritePrecision
from influxdb_client.client.exceptions import InfluxDBError
from influxdb_client.client.write_api import SYNCHRONOUS
from urllib3.exceptions import HTTPError as Urllib3Error

# ServerURL lives in the pipeline's shared module (the sinks use it too); imported here,
# where callers have always found it.
from fleetwatch.pipeline.server_url import ServerURL
from fleetwatch.pipeline.store.base import StoreError, StoreRejected
from fleetwatch.pipeline.store.lineproto import EncodedLines
from fleetwatch.retry import Backoff, retry

log = logging.getLogger(__name__)

# The server saying "later".
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# The server saying "you are talking to the wrong place, or without the right key".
_CONFIG_STATUS = frozenset({401, 403, 404})
# store.influx_api: which write API; "auto" asks the server's /ping (see ``influx``).
API_SETTINGS = ("auto", "v1", "v2")


class LineProtocolWriter:
    """Synchronous, chunked, retried line-protocol writes to one server."""

    def __init__(self, url: str, *, org: str = "fleetwatch", bucket: str = "fleetwatch",
                 token: str = "", timeout_s: float = 10.0, batch_lines: int = 5000,
                 max_retries: int = 3, retry_interval_s: float = 0.25,
                 max_retry_delay_s: float = 4.0, max_retry_time_s: float = 30.0,
                 gzip: bool = False, in_flight: int = 2, api: str | None = None) -> None:
        self.server = ServerURL.parse(url, token)
        self.url = self.server.shown  # for messages: requests go to self.server.base
        self.timeout_s = timeout_s
        # None: the v2 API, the only one of the server's kind (VictoriaMetrics); else
        # store.influx_api.
        if api is not None and api not in API_SETTINGS:
            raise ValueError(f"api must be one of {', '.join(API_SETTINGS)}, not {api!r}")
        self.api_setting = api
        # "v1" or "v2" once known; with "auto", once /ping has answered (``api()``).
        self._api: str | None = "v2" if api is None else None if api == "auto" else api
        self._version: str | None = None  # what /ping said
        self._api_lock = threading.Lock()
        self._token = token
        self._headers: dict[str, str] | None = None
        self.in_flight = max(1, in_flight)
        self._pool = ThreadPoolExecutor(max_workers=self.in_flight,
                                        thread_name_prefix="fleetwatch-write")
        self.org, self.bucket = org, bucket
        self.batch_lines = batch_lines
        self.max_retries = max_retries
        self.retry_interval_s = retry_interval_s
        self.max_retry_delay_s = max_retry_delay_s
        self.max_retry_time_s = max_retry_time_s
        # No token: VictoriaMetrics without auth ignores the header, but the
        # client insists on one, so send a placeholder rather than "Token None".
        # Credentials in the URL: influxdb-client's auth_basic sends its token as basic auth.
        self._client = InfluxDBClient(url=self.server.base,
                                      token=self.server.basic or token or "-", org=org,
                                      timeout=int(timeout_s * 1000), enable_gzip=gzip,
                                      auth_basic=bool(self.server.basic))
        self._write_api = self._client.write_api(write_options=SYNCHRONOUS)

    # -- which API
    def api(self) -> str:
        """"v1" or "v2"; with ``api="auto"`` asked of ``/ping`` at the first call (a
        ``StoreError`` while the server cannot be reached: asked again at the next)."""
        if self._api is None:
            with self._api_lock:
                if self._api is None:
                    self._version = self._ping()
                    self._api = api_of_version(self._version)
                    log.info("%s: %s, written through the %s API", self.url,
                             f"InfluxDB {self._version}" if self._version
                             else "no InfluxDB version at /ping", self._api)
        return self._api

    @property
    def v1(self) -> bool:
        """Whether writes go through InfluxDB 1.x's /write (its escaping and limits)."""
        return self.api() == "v1"

    def _ping(self) -> str | None:
        """``X-Influxdb-Version`` from ``/ping``. 1.x sets it on every answer, a 401 from a
        server that guards /ping (``ping-auth-enabled``) included."""
        # A proxy in front (basic auth in the URL) would answer 401 without its credentials.
        request = urllib.request.Request(f"{self.server.base}/ping",
                                         headers=self.server.basic_header())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as r:
                return r.headers.get("X-Influxdb-Version")
        except urllib.error.HTTPError as exc:
            version = exc.headers.get("X-Influxdb-Version")
            if version is None and exc.code in _RETRY_STATUS:
                raise StoreError(f"{self.url}/ping answered {exc.code}: cannot tell which "
                                 "InfluxDB API it serves yet; asked again at the next write"
                                 ) from exc
            return version
        except OSError as exc:  # URLError, timeouts
            raise StoreError(f"cannot ask {self.url}/ping which InfluxDB API it serves "
                             f"({exc}); asked again at the next write (store.influx_api = "
                             '"v1" or "v2" skips the question)') from exc

    def auth_headers(self) -> dict[str, str]:
        """The credentials for requests of our own (v1 writes, InfluxQL reads): the token as
        ``Token ...`` for v2; for v1, ``username:password`` as HTTP basic auth; the URL's
        ``user:password`` as basic auth for both."""
        if self._headers is None:
            api = self.api()  # asked first: a server that is away says so, not a 404 later
            if self.server.basic:
                self._headers = self.server.basic_header()
            elif not self._token:
                self._headers = {}
            elif api == "v2":
                self._headers = {"Authorization": f"Token {self._token}"}
            elif ":" not in self._token:
                raise StoreError(f"{self.url} is InfluxDB 1.x ({self._how()}): it takes "
                                 "store.token as 'username:password', or empty when its auth "
                                 "is off; for InfluxDB 2.x set store.influx_api = \"v2\"")
            else:
                basic = base64.b64encode(self._token.encode()).decode()
                self._headers = {"Authorization": f"Basic {basic}"}
        return self._headers

    def _how(self) -> str:
        """How the API was chosen, for messages."""
        if self.api_setting is None:
            return "the only API of this store.kind"
        if self.api_setting != "auto":
            return f'store.influx_api = "{self.api_setting}"'
        if self._version:
            return f"InfluxDB {self._version} by its /ping"
        return "/ping gave no InfluxDB version"

    def misconfigured(self, server_version: str | None = None) -> str:
        """What to check when the server says the URL, database/bucket or credentials are
        wrong (401, 403, 404): which API was used, why, and what to set."""
        if self.api() == "v1":
            other = ('; for InfluxDB 2.x or later set store.influx_api = "v2" or "auto"'
                     if self.api_setting == "v1" else "")
            return (f"used InfluxDB 1.x's API (/write, /query) on database {self.bucket!r} "
                    f"({self._how()}): check store.url, store.bucket (the database: CREATE "
                    f'DATABASE "{self.bucket}" if it is missing) and store.token '
                    f"('username:password' when the server's auth is on){other}")
        said = f"; the server says it is InfluxDB {server_version}" if server_version else ""
        known = server_version or self._version
        if self.api_setting is None or (known and api_of_version(known) == "v2"):
            hint = ""
        elif known:
            hint = '; for this InfluxDB 1.x set store.influx_api = "v1" (or "auto")'
        else:
            hint = '; if this is InfluxDB 1.x, set store.influx_api = "v1"'
        return (f"used the InfluxDB v2 API (/api/v2/write, org {self.org!r}, "
                f"bucket {self.bucket!r}; {self._how()}){said}: check store.url, store.org, "
                f"store.bucket and store.token{hint}")

    def write_lines(self, lines: Iterable[str], precision: str = "ms") -> int:
        """Send lines (each one line, no ``\\n``); return once every one is accepted.
        ``precision``: of their timestamps, "ms" or "ns"."""
        return self.write_blocks(_blocks(lines, self.batch_lines), precision)

    def write_blocks(self, blocks: Iterable[EncodedLines], precision: str = "ms") -> int:
        """Send blocks of complete lines in requests of about ``batch_lines``; return
        the number of lines, once every one is accepted.

        Requests go out from a worker thread while the caller's generator makes
        the next block, so encoding (Python, holding the GIL) overlaps with the
        server's ingestion; at most ``in_flight`` requests wait, bounding memory.
        The first failure is raised after the other requests have finished.
        """
        self.auth_headers()  # which API, and its credentials: before any request leaves
        sent = 0
        pending: deque[Future[None]] = deque()
        error: BaseException | None = None
        chunk: list[bytes] = []
        n_chunk = 0
        try:
            for block in blocks:
                if not block.lines:
                    continue
                chunk.append(block.body)
                n_chunk += block.lines
                if n_chunk >= self.batch_lines:
                    error = _drain(pending, self.in_flight - 1) or error
                    if error is not None:  # the store is away: stop, do not queue more
                        break
                    pending.append(self._pool.submit(self._post, b"\n".join(chunk), n_chunk,
                                                     precision))
                    sent += n_chunk
                    chunk, n_chunk = [], 0
            if chunk and error is None:
                self._post(b"\n".join(chunk), n_chunk, precision)
                sent += n_chunk
        finally:
            error = _drain(pending, 0) or error
        if error is not None:
            raise error
        return sent

    def _post(self, body: bytes, n_lines: int, precision: str = "ms") -> None:
        def failed(exc: BaseException, attempt: int, delay: float) -> None:
            # One WARNING per round (the processor's) says the server is away; these
            # attempts within it are detail.
            log.debug("write to %s failed (%s); retry %d in %.2fs", self.url, exc, attempt,
                      delay)

        attempts = 0

        def send() -> None:
            nonlocal attempts
            attempts += 1
            self._send(body, precision)

        try:
            retry(send, retryable=(_Transient,), attempts=self.max_retries + 1,
                  deadline_s=self.max_retry_time_s,
                  backoff=Backoff(self.retry_interval_s, self.max_retry_delay_s),
                  delay_of=lambda exc: getattr(exc, "retry_after", None), on_retry=failed)
        except _Transient as exc:
            raise StoreError(f"cannot write {n_lines} lines to {self.url} after {attempts} "
                             f"attempts: {exc}") from exc
        except _Refused as exc:
            if exc.status in _CONFIG_STATUS:
                raise StoreError(f"{self.url} refused {n_lines} lines ({exc}); not retried "
                                 f"here: {self.misconfigured(exc.version)}") from exc
            raise StoreRejected(f"{self.url} refused {n_lines} lines: {exc}",
                                about_frames=not store_own_reason(str(exc))) from exc

    def _send(self, body: bytes, precision: str = "ms") -> None:
        try:
            self._request(body, precision)
        except _Refused as exc:
            if exc.status in _RETRY_STATUS or exc.status is None:
                raise _Transient(str(exc), exc.retry_after) from exc
            raise
        except (Urllib3Error, OSError) as exc:  # URLError and timeouts are OSErrors
            raise _Transient(plain(exc), None) from exc

    def _request(self, body: bytes, precision: str = "ms") -> None:
        if not self.v1:
            try:
                self._write_api.write(self.bucket, self.org, body, write_precision=(
                    WritePrecision.NS if precision == "ns" else WritePrecision.MS))
            except InfluxDBError as exc:
                headers = getattr(exc, "headers", None) or {}
                raise _Refused(getattr(getattr(exc, "response", None), "status", None),
                               str(exc.message or exc).strip(),
                               _seconds(getattr(exc, "retry_after", None)),
                               headers.get("X-Influxdb-Version")) from exc
            return
        # InfluxDB 1.x before 1.8 has only /write?db=: the same body, bucket = database.
        query = urllib.parse.urlencode({"db": self.bucket,
                                        "precision": "n" if precision == "ns" else "ms"})
        request = urllib.request.Request(f"{self.server.base}/write?{query}", data=body,
                                         method="POST", headers=self.auth_headers())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise _Refused(exc.code, exc.read()[:300].decode(errors="replace").strip(),
                           _seconds(exc.headers.get("Retry-After")),
                           exc.headers.get("X-Influxdb-Version")) from exc

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._write_api.close()
        self._client.close()


class _Refused(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int | None, message: str, retry_after: float | None,
                 version: str | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message, self.retry_after = status, message, retry_after
        self.version = version  # the server's X-Influxdb-Version, if it gave one


class _Transient(Exception):
    """A failure that may pass: retried in place, then a ``StoreError``."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


_ADDRESS = re.compile(r"<[^<>]+ object at 0x[0-9a-fA-F]+>:?\s*")


def plain(exc: BaseException) -> str:
    """A connection error in words: no object address (urllib3 puts its connection's
    repr in the message), and a refused connection called what it means."""
    text = _ADDRESS.sub("", str(exc)).strip()
    if isinstance(exc, ConnectionRefusedError) or "Connection refused" in text:
        return "connection refused: is the server running?"
    return f"{type(exc).__name__}: {text}"


def _blocks(lines: Iterable[str], size: int) -> Iterator[EncodedLines]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield EncodedLines("\n".join(chunk).encode(), len(chunk), 0)
            chunk = []
    if chunk:
        yield EncodedLines("\n".join(chunk).encode(), len(chunk), 0)


def _drain(pending: deque[Future[None]], keep: int) -> BaseException | None:
    """Wait until at most ``keep`` requests are in flight; the first error among those done."""
    error = None
    while len(pending) > keep:
        exc = pending.popleft().exception()
        error = error or exc
    return error


def api_of_version(version: str | None) -> str:
    """The write API for the version ``/ping`` gives: "v1" for InfluxDB 1.x, else "v2"
    (2.x, 3.x, and servers that give none: VictoriaMetrics, InfluxDB Cloud)."""
    major = (version or "").strip().lstrip("vV").partition(".")[0]
    return "v1" if major == "1" else "v2"


def _seconds(value: object) -> float | None:
    try:
        return min(float(str(value)), 30.0) if value is not None else None
    except ValueError:
        return None


# A server's refusals that are its own state, not the frames': another writer's field type,
# a series or tag-values limit (InfluxDB's max-series-per-database, max-values-per-tag).
_OWN_REASON = re.compile(r"field type conflict|max-series|max-values-per-tag|series limit",
                         re.IGNORECASE)


def store_own_reason(message: str) -> bool:
    """Is a refusal the server's own state (frames sound, still judged) rather than the
    frames' (a time outside its retention, a value it cannot take)?"""
    return _OWN_REASON.search(message) is not None
