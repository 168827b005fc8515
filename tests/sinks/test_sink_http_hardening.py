"""The sinks' HTTP: secrets in a sink URL never logged, credentials in it sent as basic auth,
an answer read only up to a bound, any incomplete answer retried and held (never dropped),
and ``alerts.sink_timeout_s`` a deadline for the whole request. Each against a real
socket server (or the real Alertmanager), counting what it received."""

from __future__ import annotations

import base64
import contextlib
import crypt
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier, SinkError
from fleetwatch.pipeline.sinks import http as sink_http
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.am_silences import AlertmanagerSilences
from fleetwatch.pipeline.sinks.base import SinkRejected
from fleetwatch.pipeline.sinks.http import post_json
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Alert, Silence
from tests.servers import Server, alertmanager, free_port
from tests.sinks.conftest import fast, until

TOKEN = "WEBHOOKTOKEN789"
PASSWORD = "AMPASS000"


def alert(name: str, state: str = "firing", node: str = "n1") -> Alert:
    ts = time.time() - 60
    return Alert(f"gpu_temp_high/c/{node}/gpu0/{name}", "gpu_temp_high", "critical", "c", "r1",
                 node, "gpu0", state, ts - 30, ts, 91.0, f"{name} at 91 °C",  # type: ignore[arg-type]
                 fired_ts=ts, resolved_ts=ts + 30 if state == "resolved" else None)


# -- a raw HTTP server: each connection answered by the next behaviour ---------------------
Behaviour = Callable[[socket.socket], None]


def ok(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


def answer(status: int, text: bytes = b"") -> Behaviour:
    def send(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (status, len(text), text))
    return send


def garbage(conn: socket.socket) -> None:
    conn.sendall(b"garbage\r\n")


def cut_short(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 18)


def hang_up(conn: socket.socket) -> None:
    pass  # closed without a word


class RawServer:
    """Reads each request whole (headers and body, recorded), then answers it with the next
    of ``behaviours`` (then ``ok``) and closes the connection."""

    def __init__(self, behaviours: list[Behaviour] | None = None) -> None:
        self.behaviours = list(behaviours or [])
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.delivered: list[object] = []  # the bodies of the requests answered ``ok``
        self.sent = 0           # body bytes a streaming behaviour got out
        self.closed = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # a client that hung up: nothing to do
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head, _, body = data.partition(b"\r\n\r\n")
            line, *fields = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip()
                       for k, _, v in (f.partition(":") for f in fields)}
            while len(body) < int(headers.get("content-length", 0)):
                more = conn.recv(65536)
                if not more:
                    return
                body += more
            self.requests.append((line, headers, body))
            behaviour = self.behaviours.pop(0) if self.behaviours else ok
            if behaviour is ok and body:
                # Recorded before the answer: the client may look as soon as it has it.
                self.delivered.append(json.loads(body))
            behaviour(conn)

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


@pytest.fixture
def raw() -> Iterator[RawServer]:
    server = RawServer()
    yield server
    server.close()


def sent_ids(server: RawServer) -> list[str]:
    return [a["id"].split("/")[-1] for body in server.delivered
            for g in body["groups"] for a in g["alerts"]]  # type: ignore[index]


# -- #1: a webhook's secret path, and any user:password, never logged ----------------------
def _everything_logged(caplog: pytest.LogCaptureFixture, notifier: Notifier) -> str:
    return "\n".join([r.getMessage() for r in caplog.records] + [
        str(r.exc_info[1]) for r in caplog.records if r.exc_info] + [
        notifier.stats.last_error])


@pytest.mark.parametrize("behaviour, said", [
    (None, "unreachable"),                      # nothing listens
    (answer(503, b"busy"), "answered 503"),
    (answer(400, b"bad"), "refused the alerts (400)"),
])
def test_no_webhook_message_shows_its_secret_path_or_password(
        behaviour: Behaviour | None, said: str, raw: RawServer,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    port = raw.port if behaviour is not None else free_port()
    raw.behaviours = [behaviour] * 50 if behaviour is not None else []
    url = f"http://hook:{PASSWORD}@127.0.0.1:{port}/services/T000/B000/{TOKEN}"
    notifier = Notifier([WebhookSink(url, timeout_s=2)], attempts=2, backoff=fast,
                        retry_s=0.2)
    try:
        notifier.send([alert("a")])
        # held (5xx, unreachable) until given up, or refused (4xx): failed either way
        assert until(lambda: notifier.stats.sinks["webhook"].failed >= 1)
    finally:
        notifier.close()
    logged = _everything_logged(caplog, notifier)
    assert said in logged
    assert f"webhook http://hook:***@127.0.0.1:{port}/*** " in logged
    assert TOKEN not in logged and PASSWORD not in logged and "B000" not in logged


def test_no_alertmanager_message_shows_its_password(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    port = free_port()
    sink = AlertmanagerSink(f"http://amuser:{PASSWORD}@127.0.0.1:{port}", resend_s=60,
                            timeout_s=1)
    notifier = Notifier([sink], attempts=1, backoff=fast, retry_s=0.2)
    try:
        notifier.send([alert("a")])
        sink.mutes([Silence("s1", (("node", "=", "n1"),), time.time() - 1, time.time() + 60,
                            "ops")], {})
        assert until(lambda: notifier.stats.sinks["alertmanager"].failed >= 1)
    finally:
        notifier.close()
    logged = _everything_logged(caplog, notifier)
    assert f"Alertmanager http://amuser:***@127.0.0.1:{port}/api/v2/alerts unreachable" in logged
    assert f"http://amuser:***@127.0.0.1:{port}/api/v2/silences" in logged  # the mirroring
    assert PASSWORD not in logged


# -- #2: user:password@ in the URL sent as basic auth -------------------------------------
def test_a_webhook_url_with_a_user_and_password_sends_them_as_basic_auth(
        raw: RawServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://hook:p%40ss{PASSWORD}@127.0.0.1:{raw.port}/services/T000/B000/{TOKEN}"
    notifier = Notifier([WebhookSink(url, timeout_s=5)], attempts=1, background=False)
    notifier.send([alert("a")])
    notifier.close()
    (line, headers, _), = raw.requests
    assert line == f"POST /services/T000/B000/{TOKEN} HTTP/1.1"
    assert headers["authorization"] == "Basic " + base64.b64encode(
        f"hook:p@ss{PASSWORD}".encode()).decode()
    assert headers["host"] == f"127.0.0.1:{raw.port}"
    assert sent_ids(raw) == ["a"] and notifier.stats.sinks["webhook"].sent == 1


@pytest.fixture(scope="module")
def am_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real Alertmanager behind its own basic auth (``--web.config.file``)."""
    tmp = tmp_path_factory.mktemp("amauth")
    web = tmp / "web.yml"
    hashed = crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    web.write_text(f"basic_auth_users:\n  amuser: '{hashed}'\n")
    server = alertmanager(tmp)
    server.argv.append(f"--web.config.file={web}")
    server.start()
    yield server
    server.stop()


def _am_get(am: Server, path: str, auth: bool = True) -> object:
    req = urllib.request.Request(f"http://{am.address}/api/v2{path}")
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"amuser:{PASSWORD}".encode()).decode())
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


def test_alertmanager_behind_basic_auth_gets_the_alerts_and_silences(
        am_auth: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(urllib.error.HTTPError) as refused:  # it does want credentials
        _am_get(am_auth, "/alerts", auth=False)
    assert refused.value.code == 401
    node = f"node-auth-{time.time_ns()}"
    sink = AlertmanagerSink(f"http://amuser:{PASSWORD}@{am_auth.address}/", resend_s=60,
                            timeout_s=5)
    a = alert("a", node=node)
    silence = Silence(f"s-{node}", (("node", "=", node),), time.time() - 1,
                      time.time() + 600, "ops")
    sink.send([Notice(a)])
    sink.mutes([silence], {})                   # GET the silences, POST one
    sink.mutes([], {})                          # GET, DELETE it
    sink.mutes([silence], {})                   # and again
    assert sink.silence_errors == 0
    quoted = urllib.parse.quote(f'node="{node}"')
    got = _am_get(am_auth, f"/alerts?filter={quoted}")
    assert [g["labels"]["node"] for g in got] == [node]  # type: ignore[index]
    mine = [s for s in _am_get(am_auth, "/silences")  # type: ignore[union-attr]
            if s["comment"].startswith(f"fleetwatch silence s-{node}")]
    assert sorted(s["status"]["state"] for s in mine) == ["active", "expired"]
    assert PASSWORD not in "\n".join(r.getMessage() for r in caplog.records)


# -- #5: an answer read only up to a bound -------------------------------------------------
def streaming(total: int, server: RawServer, status: bytes = b"200 OK") -> Behaviour:
    def send(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n" % (status, total))
        chunk = b"[" + b" " * (1 << 20)
        while server.sent < total:
            conn.sendall(chunk)
            server.sent += len(chunk)
    return send


def test_a_huge_answer_to_a_post_is_not_read_whole(raw: RawServer) -> None:
    total = 512 << 20
    raw.behaviours = [streaming(total, raw)]
    post_json(raw.url + "/hook", {"a": 1}, 10, "webhook")  # 200: delivered
    # The client stopped reading after ANSWER_LIMIT: the server could send only what the
    # two sockets' buffers hold before its writes failed.
    assert until(lambda: raw.requests and not _still_sending(raw))
    assert raw.sent < 64 << 20
    assert sink_http.ANSWER_LIMIT == 64 << 10


def _still_sending(server: RawServer) -> bool:
    before = server.sent
    time.sleep(0.2)
    return server.sent != before


def test_a_silence_list_past_its_bound_is_a_clear_error(raw: RawServer) -> None:
    limit = 32 << 20
    raw.behaviours = [streaming(limit + (256 << 20), raw)]
    with pytest.raises(SinkError) as err:
        AlertmanagerSilences(raw.url, 30).list()
    assert str(err.value).startswith(
        f"Alertmanager GET {raw.url}/api/v2/silences answered more than 32 MiB")
    assert until(lambda: not _still_sending(raw))
    assert raw.sent < limit + (64 << 20)
    assert limit == sink_http.SILENCES_LIMIT


# -- #7: any incomplete answer is retried, then held; never dropped ------------------------
@pytest.mark.parametrize("bad, said", [
    (garbage, "BadStatusLine"), (cut_short, "IncompleteRead"),
    (hang_up, "RemoteDisconnected")])
def test_an_incomplete_answer_is_an_outage_and_the_held_changes_arrive(
        bad: Behaviour, said: str, raw: RawServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    raw.behaviours = [bad, bad, bad]              # the first delivery's two tries, a retry
    notifier = Notifier([WebhookSink(raw.url + "/hook", timeout_s=5)], attempts=2,
                        backoff=fast)
    try:
        notifier.send([alert("a")])
        notifier.send([alert("b")])
        assert until(lambda: "b" in sent_ids(raw))
    finally:
        notifier.close()
    counts = notifier.stats.sinks["webhook"]
    assert (counts.failed, notifier.stats.failed) == (0, 0)
    assert sorted(set(sent_ids(raw))) == ["a", "b"]
    assert counts.retries >= 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(said in w and "no complete answer" in w for w in warnings)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- #8: sink_timeout_s bounds the whole request -------------------------------------------
def dripping(every_s: float, head: bool, stop: threading.Event) -> Behaviour:
    """A byte every ``every_s`` (of the status line with ``head``, else of the body)."""
    def send(conn: socket.socket) -> None:
        data = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100
        if not head:
            conn.sendall(data[:40])
            data = data[40:]
        for byte in data:
            if stop.wait(every_s):
                return
            conn.sendall(bytes([byte]))
    return send


@pytest.mark.parametrize("head", [False, True], ids=["body", "status line"])
def test_a_dripping_receiver_is_given_up_at_the_deadline(head: bool, raw: RawServer) -> None:
    stop = threading.Event()
    raw.behaviours = [dripping(0.3, head, stop)]
    start = time.monotonic()
    try:
        with pytest.raises(SinkError) as err:
            post_json(raw.url + "/hook", {"a": 1}, 1.5, "webhook")
        took = time.monotonic() - start
    finally:
        stop.set()
    assert 1.5 <= took < 2.5
    assert str(err.value) == (f"webhook {raw.url}/hook gave no complete answer within 1.5s "
                              "(alerts.sink_timeout_s)")


def test_a_dripping_receiver_is_retried_and_its_changes_held(raw: RawServer) -> None:
    stop = threading.Event()
    raw.behaviours = [dripping(0.3, False, stop), dripping(0.3, False, stop)]
    notifier = Notifier([WebhookSink(raw.url + "/hook", timeout_s=1)], attempts=2,
                        backoff=fast)
    try:
        notifier.send([alert("a")])
        assert until(lambda: sent_ids(raw) == ["a"])  # after two drips given up
    finally:
        stop.set()
        notifier.close()
    counts = notifier.stats.sinks["webhook"]
    assert (counts.sent, counts.failed, counts.retries) == (1, 0, 2)
    assert len(raw.requests) == 3


def test_a_refusal_is_still_not_retried(raw: RawServer) -> None:
    raw.behaviours = [answer(422, b"no such receiver")]
    with pytest.raises(SinkRejected) as err:
        post_json(raw.url + "/hook", {"a": 1}, 5, "webhook")
    assert str(err.value) == (f"webhook {raw.url}/hook refused the alerts (422): "
                              "no such receiver")
    assert len(raw.requests) == 1



def test_the_credentials_do_not_follow_a_redirect_elsewhere(raw: RawServer) -> None:
    elsewhere = RawServer()
    try:
        def moved(conn: socket.socket) -> None:
            conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: %s/other\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n" % elsewhere.url.encode())
        raw.behaviours = [moved]
        with pytest.raises(SinkError, match="a redirect to .*/other: not followed"):
            post_json(f"http://hook:{PASSWORD}@127.0.0.1:{raw.port}/hook", {"a": 1}, 5,
                      "webhook")
        (_, sent, _), = raw.requests
    finally:
        elsewhere.close()
    assert sent["authorization"].startswith("Basic ")
    assert elsewhere.requests == []  # no redirect is followed (test_sink_redirects)
