"""A sink that refuses fleetwatch's credentials (401, 403, a proxy's 407) is a state of its
configuration, not of the alerts: one clear error line naming what to check, the changes
held and retried quietly like an outage (``alerts.sink_retry_s``), and every one of them
delivered, in order, once the credentials are right; a line when it works again. Against the
real Alertmanager behind basic auth whose password is rotated on its side, and a raw
receiver that answers 401, then 200. A refusal of the batch itself (400, 413, 422) is still
not retried; a re-send Alertmanager refuses is said once, not every second."""

from __future__ import annotations

import base64
import crypt
import json
import logging
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.base import SinkError, SinkRejected, SinkUnauthorized
from fleetwatch.pipeline.sinks.http import post_json
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.retry import Backoff
from tests.servers import alertmanager
from tests.sinks.conftest import fast, until
from tests.sinks.test_sink_http_hardening import RawServer, answer, ok, sent_ids

OLD, NEW = "oldPASS111", "newPASS222"


def alert(name: str, severity: str = "critical", state: str = "firing",
          node: str = "n1") -> Alert:
    ts = time.time() - 60
    return Alert(f"gpu_temp_high/c/{node}/gpu0/{name}", "gpu_temp_high", severity, "c", "r1",
                 node, "gpu0", state, ts - 30, ts, 91.0, f"{name} at 91 °C",  # type: ignore[arg-type]
                 fired_ts=ts, resolved_ts=ts + 30 if state == "resolved" else None)


class RotatingAM:
    """A real Alertmanager behind basic auth (``--web.config.file``, which it reads at every
    request): ``accept(password)`` rotates the password on its side."""

    def __init__(self, tmp: Path) -> None:
        self.web = tmp / "web.yml"
        self.accept(OLD)
        self.server = alertmanager(tmp)
        self.server.argv.append(f"--web.config.file={self.web}")
        self.server.start()
        self.address = self.server.address

    def accept(self, password: str) -> None:
        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
        self.web.write_text(f"basic_auth_users:\n  amuser: '{hashed}'\n")

    def alerts_of(self, node: str) -> list[dict[str, object]]:
        quoted = urllib.parse.quote(f'node="{node}"')
        req = urllib.request.Request(f"http://{self.address}/api/v2/alerts?filter={quoted}")
        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"amuser:{NEW}".encode()).decode())
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.load(r)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def am_rotating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RotatingAM]:
    am = RotatingAM(tmp_path_factory.mktemp("amrot"))
    yield am
    am.server.stop()


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info]


# -- the messages ---------------------------------------------------------------------------
@pytest.mark.parametrize("status, said", [
    (401, "refused fleetwatch's credentials (401): check the user:password in "
          "alerts.webhook_url"),
    (403, "refused fleetwatch access (403): check the user:password in alerts.webhook_url"),
    (407, "a proxy on the way asked for credentials (407): check the user:password of the "
          "proxy in fleetwatch's https_proxy/http_proxy"),
])
def test_a_credentials_refusal_is_worth_retrying_and_says_what_to_check(
        status: int, said: str, raw: RawServer) -> None:
    raw.behaviours = [answer(status)]           # an empty body
    with pytest.raises(SinkUnauthorized) as err:
        post_json(raw.url + "/hook", {"a": 1}, 5, "webhook", setting="alerts.webhook_url")
    assert isinstance(err.value, SinkError)     # held and retried like an outage
    assert str(err.value) == f"webhook {raw.url}/hook {said}"


def test_a_credentials_refusal_quotes_the_receivers_text(raw: RawServer) -> None:
    raw.behaviours = [answer(401, b"Unauthorized\n")]
    with pytest.raises(SinkUnauthorized) as err:
        post_json(raw.url + "/a", {"a": 1}, 5, "Alertmanager", setting="alerts.alertmanager_url")
    assert str(err.value) == (f"Alertmanager {raw.url}/a refused fleetwatch's credentials "
                              "(401: Unauthorized): check the user:password in "
                              "alerts.alertmanager_url")


def test_an_html_error_page_is_quoted_on_one_line_and_cut(raw: RawServer) -> None:
    """An ingress's 401 page: its lines and indentation collapsed, at most 300 characters,
    so the hint on what to check stays on the ERROR line."""
    page = (b"<html>\n  <head><title>401 Authorization Required</title></head>\n  <body>\n"
            + b"    <center><h1>401 Authorization Required</h1></center>\n" * 40
            + b"  </body>\n</html>\n")
    raw.behaviours = [answer(401, page)]
    with pytest.raises(SinkUnauthorized) as err:
        post_json(raw.url + "/hook", {"a": 1}, 5, "webhook", setting="alerts.webhook_url")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"webhook {raw.url}/hook refused fleetwatch's credentials (401: "
                           "<html> <head><title>401 Authorization Required</title></head> "
                           "<body> <center>")
    quote = text[text.index("(401: ") + 6:text.index("): check")]
    assert len(quote) == 300 and quote.endswith("…")
    assert text.endswith("): check the user:password in alerts.webhook_url")


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_refusal_of_the_batch_itself_is_still_final_and_ends_in_no_empty_quote(
        status: int, raw: RawServer) -> None:
    raw.behaviours = [answer(status)]
    with pytest.raises(SinkRejected) as err:
        post_json(raw.url + "/hook", {"a": 1}, 5, "webhook", setting="alerts.webhook_url")
    assert str(err.value) == f"webhook {raw.url}/hook refused the alerts ({status})"


# -- #2: the webhook: held through the refusals, all delivered in order after ---------------
def test_changes_refused_with_401_are_held_and_delivered_in_order_once_accepted(
        raw: RawServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    raw.behaviours = [answer(401)] * 6          # the receiver still on the old password
    url = f"http://hookuser:{NEW}@127.0.0.1:{raw.port}/services/T0/B0/SECRET"
    notifier = Notifier([WebhookSink(url, timeout_s=5)], attempts=3,
                        backoff=lambda: Backoff(0.02, 0.05), retry_s=30)
    try:
        notifier.send([alert("crit1")])
        notifier.send([alert("crit2")])
        notifier.send([alert("warn1", severity="warning")])
        assert until(lambda: len(raw.requests) >= 7)  # the refusals, then the one accepted
        assert until(lambda: notifier.stats.sinks["webhook"].sent >= 1)
    finally:
        notifier.close()
    counts = notifier.stats.sinks["webhook"]
    assert sent_ids(raw) == ["crit1", "crit2", "warn1"]
    assert (counts.failed, notifier.stats.failed) == (0, 0)
    assert counts.retries >= 6
    # Not retried in place (pointless with the same credentials): one request per retry.
    assert len(raw.requests) == 7
    errors = _errors(caplog)
    assert errors == [
        f"alert sink webhook: webhook http://hookuser:***@127.0.0.1:{raw.port}/*** refused "
        "fleetwatch's credentials (401): check the user:password in alerts.webhook_url; "
        "holding 1 alert changes and retrying for up to 30s (alerts.sink_retry_s)"]
    assert not _tracebacks(caplog)
    back = [r.getMessage() for r in caplog.records if "is back" in r.getMessage()]
    assert len(back) == 1 and "3 held alert changes delivered" in back[0]
    assert NEW not in "\n".join(r.getMessage() for r in caplog.records)


def test_without_holding_a_401_is_one_clear_error_per_batch(
        raw: RawServer, caplog: pytest.LogCaptureFixture) -> None:
    raw.behaviours = [answer(401)]
    notifier = Notifier([WebhookSink(raw.url + "/hook", timeout_s=5)], attempts=3,
                        backoff=fast, retry_s=0, background=False)
    notifier.send([alert("a")])
    notifier.close()
    assert len(raw.requests) == 1
    assert _errors(caplog) == [
        f"alert sink webhook failed, changes not delivered there: webhook {raw.url}/*** "
        "refused fleetwatch's credentials (401): check the user:password in alerts.webhook_url"]


def _notifier(am: RotatingAM, attempts: int) -> Notifier:
    """A notifier with one Alertmanager sink that has the NEW password, re-sending fast."""
    sink = AlertmanagerSink(f"http://amuser:{NEW}@{am.address}/", resend_s=0.05, timeout_s=5)
    return Notifier([sink], attempts=attempts, backoff=lambda: Backoff(0.05, 0.2), retry_s=60,
                    tick_s=0.01)


# -- #1: Alertmanager with a wrong password: one line, quiet retries, a line when it works ----
def test_a_wrong_alertmanager_password_is_one_error_then_quiet_retries_then_delivered(
        am_rotating: RotatingAM, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    am_rotating.accept(OLD)                     # fleetwatch has the new one already
    node = f"node-rot-{time.time_ns()}"
    notifier = _notifier(am_rotating, attempts=2)
    try:
        notifier.send([alert("crit", node=node)])
        notifier.send([alert("warn", severity="warning", node=node)])
        # Retried through the refusals: each counted, none logged again.
        assert until(lambda: notifier.stats.sinks["alertmanager"].retries >= 6)
        errors = _errors(caplog)
        assert len(errors) == 1, errors
        assert errors[0].startswith(
            f"alert sink alertmanager: Alertmanager http://amuser:***@{am_rotating.address}"
            "/api/v2/alerts refused fleetwatch's credentials (401: Unauthorized): check the "
            "user:password in alerts.alertmanager_url; holding 1 alert changes")
        assert not _tracebacks(caplog)
        am_rotating.accept(NEW)                 # the rotation done on its side
        # What Alertmanager has, as seen while the notifier re-sends: re-sent every 0.05 s,
        # an alert ends 0.2 s after its last post (after close, a slow read finds none).
        got: list[dict[str, object]] = []

        def both() -> bool:
            got[:] = am_rotating.alerts_of(node)
            return len(got) == 2
        assert until(both)
        assert until(lambda: any("is back" in r.getMessage() for r in caplog.records))
    finally:
        notifier.close()
    assert sorted(a["labels"]["severity"] for a in got) == ["critical", "warning"]  # type: ignore[index]
    assert notifier.stats.sinks["alertmanager"].failed == 0
    assert len(_errors(caplog)) == 1 and not _tracebacks(caplog)
    assert NEW not in "\n".join(r.getMessage() for r in caplog.records)


def test_a_wrong_password_for_the_resends_alone_is_not_a_traceback_a_second(
        am_rotating: RotatingAM, caplog: pytest.LogCaptureFixture) -> None:
    """The alert went through; then the password changed on Alertmanager's side: its
    re-sends are refused (the report's flood: a traceback at every tick)."""
    caplog.set_level(logging.DEBUG)
    am_rotating.accept(NEW)
    node = f"node-resend-{time.time_ns()}"
    notifier = _notifier(am_rotating, attempts=1)
    try:
        notifier.send([alert("crit", node=node)])
        assert until(lambda: notifier.stats.sinks["alertmanager"].sent == 1)
        am_rotating.accept(OLD)
        assert until(lambda: notifier.stats.sinks["alertmanager"].retries >= 5)
        errors = _errors(caplog)
        assert len(errors) == 1 and "check the user:password in alerts.alertmanager_url" in (
            errors[0]), errors
        assert not _tracebacks(caplog)
        am_rotating.accept(NEW)
        assert until(lambda: any("is back" in r.getMessage() for r in caplog.records))
    finally:
        notifier.close()
    assert len(_errors(caplog)) == 1 and not _tracebacks(caplog)


# -- a re-send refused for good (a 404 from a proxy path, a 400): said once, backed off -------
def test_a_refused_resend_is_said_once_counted_and_backed_off(
        raw: RawServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    refusals = 6
    posts = [ok, *[answer(404, b"no such path")] * refusals]

    def routed(conn: socket.socket) -> None:  # the silence list empty; POSTs as in ``posts``
        line = raw.requests[-1][0]
        if line.startswith("GET "):
            answer(200, b"[]")(conn)
        else:
            (posts.pop(0) if posts else ok)(conn)

    raw.behaviours = [routed] * 1000
    sink = AlertmanagerSink(raw.url, resend_s=0.01, timeout_s=5)
    notifier = Notifier([sink], attempts=1, backoff=lambda: Backoff(0.05, 0.1), tick_s=0.01)
    try:
        notifier.send([alert("a")])
        assert until(lambda: notifier.stats.sinks["alertmanager"].failed >= refusals)
        assert until(lambda: any("accepted again" in r.getMessage() for r in caplog.records))
    finally:
        notifier.close()
    errors = _errors(caplog)
    assert errors == [
        f"alert sink alertmanager: Alertmanager {raw.url}/api/v2/alerts refused the alerts "
        "(404): no such path; its re-sends are tried again with backoff, each refusal "
        "counted (fleetwatch_alert_sink_failed_total), said again once one goes through"]
    assert not _tracebacks(caplog)
    assert notifier.stats.sinks["alertmanager"].failed == refusals


@pytest.fixture
def raw() -> Iterator[RawServer]:
    server = RawServer()
    yield server
    server.close()



class BuggyTicks:
    """A sink whose ticks raise (a bug) until ``fixed``."""

    name, notify_only = "alertmanager", True

    def __init__(self, failures: int) -> None:
        self.failures, self.ticks = failures, 0

    def send(self, changes: object) -> None:
        pass

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks <= self.failures:
            raise KeyError("a bug")

    def close(self) -> None:
        pass


def test_a_tick_that_keeps_failing_with_a_bug_is_one_traceback_not_one_a_tick(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sink = BuggyTicks(failures=5)
    notifier = Notifier([sink], backoff=lambda: Backoff(0.02, 0.05), tick_s=0.001)
    try:
        assert until(lambda: sink.ticks > 5)
        assert until(lambda: any("accepted again" in r.getMessage() for r in caplog.records))
    finally:
        notifier.close()
    assert len(_tracebacks(caplog)) == 1
    assert notifier.stats.sinks["alertmanager"].failed == 5
