"""An open page across a dashboard restart: while the server is away the page says so (not a
stale "refreshed … · 0 s ago"), and once it is back on the same port the page refreshes again
by itself, without a reload.

The server is the production one (waitress, ``serve``) on a fixed port, stopped and started
again as systemd's ``Restart=always`` would."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards.app import create_app, serve
from tests.dashboards.conftest import SimFleet
from tests.dashboards.test_browser import texts

pytestmark = pytest.mark.browser
REFRESH_S = 1.0


class Server:
    """The dashboard served on one port, which can be stopped and started again."""

    def __init__(self, fleet: SimFleet) -> None:
        self.fleet = fleet
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._until = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._until = threading.Event()
        self._thread = threading.Thread(target=serve, args=(self.fleet.reader(),), kwargs={
            "port": self.port, "refresh_s": REFRESH_S, "until": self._until}, daemon=True)
        self._thread.start()
        until(self._answers, timeout=30)

    def stop(self) -> None:
        self._until.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        until(lambda: not self._answers(), timeout=30)

    def _answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            return True
        except OSError:
            return False


@pytest.fixture
def server(sim_fleet: SimFleet) -> Iterator[Server]:
    s = Server(sim_fleet)
    s.start()
    yield s
    s.stop()


def one(dash_duo, selector: str) -> str:
    found = texts(dash_duo, selector)
    return found[0] if found else ""


@pytest.mark.parametrize(("path", "stamp", "banner"), [
    ("/", "#fleet-updated", "#fleet-offline"),
    ("/alerts", "#alerts-updated", "#alerts-offline"),
    ("/node/node-001", "#node-updated", "#node-offline"),
])
def test_page_recovers_by_itself_after_the_dashboard_restarts(
        dash_duo, server: Server, path: str, stamp: str, banner: str) -> None:
    dash_duo.driver.get(f"http://127.0.0.1:{server.port}{path}")
    until(lambda: "refreshed" in one(dash_duo, stamp), timeout=30)
    assert not one(dash_duo, banner)
    server.stop()
    time.sleep(3 * REFRESH_S)  # a refresh or two fail with no answer at all
    # Away: the page says so, and when it last had an answer, instead of looking fresh.
    until(lambda: "not answering" in one(dash_duo, banner), timeout=30)
    away = one(dash_duo, banner)
    assert "last answer at" in away and "Retrying every 1 s" in away, away
    before = one(dash_duo, stamp)
    time.sleep(2 * REFRESH_S)
    assert one(dash_duo, stamp) == before  # nothing claims a refresh it did not get
    server.start()
    # Back on the same port: the page refreshes again and the banner goes, with no reload.
    until(lambda: one(dash_duo, stamp) != before, timeout=30)
    until(lambda: not one(dash_duo, banner), timeout=30)
    later = one(dash_duo, stamp)
    until(lambda: one(dash_duo, stamp) != later, timeout=30)  # and keeps refreshing


class FrozenStore:
    """A store whose reads, once ``frozen`` is set, wait until it is cleared: a dashboard
    stuck on its store (or stopped with SIGSTOP) answers nothing and fails nothing."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.frozen = threading.Event()
        self.thawed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not callable(value):
            return value

        def read(*args: Any, **kwargs: Any) -> Any:
            if self.frozen.is_set():
                self.thawed.wait(60)
            return value(*args, **kwargs)
        return read


def test_a_hung_dashboard_is_said_once_a_request_waits_too_long(dash_duo,
                                                                sim_fleet: SimFleet) -> None:
    store = FrozenStore(sim_fleet.reader())
    dash_duo.start_server(create_app(store, refresh_s=REFRESH_S))
    until(lambda: "refreshed" in one(dash_duo, "#fleet-updated"), timeout=30)
    store.frozen.set()
    until(lambda: "not answering" in one(dash_duo, "#fleet-offline"), timeout=20)
    hung = one(dash_duo, "#fleet-offline")
    assert "hung or very slow" in hung and "Waiting for that answer" in hung, hung
    store.frozen.clear()
    store.thawed.set()
    until(lambda: not one(dash_duo, "#fleet-offline"), timeout=30)
    later = one(dash_duo, "#fleet-updated")
    until(lambda: one(dash_duo, "#fleet-updated") != later, timeout=30)
