"""A sink URL that answers a redirect: never followed (urllib would re-send a POST as a GET
without its alerts, and the page's 200 would count them delivered), a failure that names
the Location and the setting, counted at once, the alerts held until the URL is right.
Against a real local HTTP server, and the real Alertmanager behind it."""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.parse
import urllib.request

import pytest

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.base import SinkRedirected
from fleetwatch.pipeline.sinks.http import post_json
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from tests.servers import Server
from tests.sinks.conftest import fast, until
from tests.sinks.test_sink_http_hardening import Behaviour, RawServer, alert, raw, sent_ids

__all__ = ["raw"]  # the fixture, used by name


def moved(status: int, location: str) -> Behaviour:
    def send(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 %d Moved\r\nLocation: %s\r\nContent-Length: 0\r\n"
                     b"Connection: close\r\n\r\n" % (status, location.encode()))
    return send


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_and_names_where_it_points(status: int,
                                                              raw: RawServer) -> None:
    raw.behaviours = [moved(status, "/hook-v2")]
    with pytest.raises(SinkRedirected) as err:
        post_json(raw.url + "/hook", {"a": 1}, 5, "webhook", setting="alerts.webhook_url")
    assert [line for line, _, _ in raw.requests] == ["POST /hook HTTP/1.1"]  # no GET after
    assert str(err.value) == (
        f"webhook {raw.url}/hook answered {status}, a redirect to {raw.url}/hook-v2: not "
        "followed (a redirected POST loses its alerts), alerts not delivered; set "
        "alerts.webhook_url to the final URL")


def test_a_redirected_webhook_counts_a_failure_holds_the_alert_and_masks_the_path(
        raw: RawServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    raw.behaviours = [moved(301, "https://tickets.example.com/SECRET/hook")] * 3
    notifier = Notifier([WebhookSink(raw.url + "/SECRET", timeout_s=5)], attempts=3,
                        backoff=fast)
    try:
        notifier.send([alert("a")])
        counts = notifier.stats.sinks["webhook"]
        assert until(lambda: counts.failed == 1)      # at once, not after sink_retry_s
        assert counts.sent == 0
        # Held, and delivered (as a POST with its body) once the URL answers 2xx.
        assert until(lambda: sent_ids(raw) == ["a"])
    finally:
        notifier.close()
    assert len(raw.requests) == 4 and all(r[0].startswith("POST /SECRET ")
                                          for r in raw.requests)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("answered 301, a redirect to https://tickets.example.com/***" in e
               and "set alerts.webhook_url to the final URL" in e for e in errors)
    assert "SECRET" not in "\n".join(r.getMessage() for r in caplog.records)
    assert (counts.sent, counts.failed) == (1, 1)


def _am_alerts(am: Server, node: str) -> list[dict[str, object]]:
    url = f"http://{am.address}/api/v2/alerts?filter=" + urllib.parse.quote(f'node="{node}"')
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)  # type: ignore[no-any-return]


@pytest.mark.parametrize("status", [301, 308])
def test_alertmanager_behind_a_redirect_gets_nothing_and_the_failure_is_counted(
        status: int, am: Server, raw: RawServer, caplog: pytest.LogCaptureFixture) -> None:
    """A proxy in front of the real Alertmanager answers 301 or 308 (http -> https): the
    real sink path (``Notifier``, its lane, ``AlertmanagerSink``) does not deliver, says
    so, counts it, and holds the alert; pointed at Alertmanager itself, it arrives."""
    caplog.set_level(logging.DEBUG)
    node = f"node-moved-{time.time_ns()}"
    raw.behaviours = [moved(status, f"http://{am.address}/api/v2/alerts")] * 50
    sink = AlertmanagerSink(raw.url, resend_s=60, timeout_s=5)
    notifier = Notifier([sink], attempts=2, backoff=fast)
    try:
        notifier.send([alert("a", node=node)])
        counts = notifier.stats.sinks["alertmanager"]
        assert until(lambda: counts.failed == 1)
        # (its silence mirror's GET is redirected too: also not followed)
        assert "POST /api/v2/alerts HTTP/1.1" in [r[0] for r in raw.requests]
        assert _am_alerts(am, node) == []            # nothing reached Alertmanager
        assert counts.sent == 0
    finally:
        notifier.close(timeout_s=1)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(f"a redirect to http://{am.address}/api/v2/alerts" in e
               and "alerts.alertmanager_url" in e for e in errors)
    direct = AlertmanagerSink(f"http://{am.address}", resend_s=60, timeout_s=5)
    direct.send([Notice(alert("a", node=node))])
    assert [g["labels"]["node"] for g in _am_alerts(am, node)] == [node]  # type: ignore[index]
