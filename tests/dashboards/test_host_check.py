"""DNS rebinding: the dashboard answers only a Host it serves (loopback names, and the names
in dashboard.allowed_hosts), on a real waitress server as `fleetwatch dashboard` runs it."""

from __future__ import annotations

import http.client
import logging
import threading
from collections.abc import Iterator

import pytest

from fleetwatch.config import ConfigError, load
from fleetwatch.dashboards.app import host_allowed, serve
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.service import listen
from tests.servers import free_port

# What the page asks for the alerts table (as /tmp/r16/sec/rebind.sh, the security review's).
ALERTS = ('{"output":"alerts-updated.children","outputs":{"id":"alerts-updated",'
          '"property":"children"},"inputs":[{"id":"alerts-tick","property":"n_intervals",'
          '"value":1}],"changedPropIds":["alerts-tick.n_intervals"]}')


@pytest.fixture
def dashboard(tmp_path) -> Iterator[int]:
    SqliteStore(tmp_path / "f.db").close()
    port = free_port()
    sock = listen("127.0.0.1", port, "dashboard.port")
    stop = threading.Event()
    t = threading.Thread(target=serve, kwargs=dict(
        store=SqliteStore(tmp_path / "f.db", read_only=True), port=port, sock=sock,
        until=stop, allowed_hosts=("fleet.example.com", "proxy.example.com:8443")))
    t.start()
    yield port
    stop.set()
    t.join(10)
    sock.close()


def _get(port: int, host: str, method: str = "GET", path: str = "/",
         body: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Host": host}
    if body is not None:
        headers |= {"Content-Type": "application/json", "Origin": f"http://{host}"}
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


def test_a_foreign_host_is_refused_and_logged_once(dashboard, caplog):
    port = dashboard
    caplog.set_level(logging.WARNING, "fleetwatch.dashboards.app")
    status, body = _get(port, f"attacker.example:{port}")
    assert status == 421
    assert b"dashboard.allowed_hosts" in body
    status, body = _get(port, f"attacker.example:{port}", "POST", "/_dash-update-component",
                        ALERTS)
    assert (status, b"alerts" in body) == (421, False)
    refused = [r.getMessage() for r in caplog.records if "refused a request" in r.getMessage()]
    assert refused == [f"refused a request for Host 'attacker.example:{port}' (answered 421): "
                       "the dashboard answers only localhost, 127.0.0.1, [::1] and "
                       "dashboard.allowed_hosts (fleet.example.com, proxy.example.com:8443), "
                       "so that a web page cannot read it by DNS rebinding. A reverse proxy "
                       "that forwards this name: add it to dashboard.allowed_hosts"]


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "LOCALHOST:9000",
                                  "[::1]:{port}", "fleet.example.com", "fleet.example.com:443",
                                  "proxy.example.com:8443"])
def test_loopback_and_allowed_names_are_served(dashboard, host):
    status, body = _get(dashboard, host.format(port=dashboard))
    assert status == 200
    assert b"<title>fleetwatch</title>" in body


@pytest.mark.parametrize("host", ["proxy.example.com:9000", "proxy.example.com",
                                  "localhost.attacker.example", "127.0.0.1.nip.io:8050",
                                  "10.0.0.5:8050", "fleet.example.com.evil.example"])
def test_lookalikes_are_refused(host):
    assert not host_allowed(host, ("fleet.example.com", "proxy.example.com:8443"))


def test_allowed_hosts_is_a_setting_checked_at_load():
    c = load(env={"FLEETWATCH_DASHBOARD_ALLOWED_HOSTS": "fleet.example.com, b.example:8443"})
    assert c.dashboard.allowed_hosts == ("fleet.example.com", "b.example:8443")
    with pytest.raises(ConfigError, match="'https://fleet.example.com/' is not a host name"):
        load(env={"FLEETWATCH_DASHBOARD_ALLOWED_HOSTS": "https://fleet.example.com/"})


@pytest.mark.parametrize("value, why", [
    ("*", "'\\*': no wildcards"),
    ("*.example.com", "no wildcards"),
    ('["fleet.example.com"]', "names separated by commas, with no brackets or quotes"),
    ("'fleet.example.com'", "is not a host name"),
])
def test_names_that_could_never_match_a_host_are_refused_at_load(value, why):
    """A wildcard is compared literally by no browser's Host, and a TOML list written into
    the environment variable is one bogus name: both refused, saying what to write."""
    with pytest.raises(ConfigError, match=why):
        load(env={"FLEETWATCH_DASHBOARD_ALLOWED_HOSTS": value})


def test_an_ipv6_host_and_names_with_underscores_are_accepted():
    c = load(env={"FLEETWATCH_DASHBOARD_ALLOWED_HOSTS": "[fd00::1]:8443,dash_board.lab"})
    assert c.dashboard.allowed_hosts == ("[fd00::1]:8443", "dash_board.lab")


def test_the_address_logged_for_an_ipv6_bind_opens_in_a_browser():
    from fleetwatch.urls import http_url

    assert http_url("::1", 8050) == "http://[::1]:8050/"
    assert http_url("127.0.0.1", 9400, "/metrics") == "http://127.0.0.1:9400/metrics"


def test_a_port_no_host_header_can_carry_is_refused():
    with pytest.raises(ConfigError, match="port 99999 is not a TCP port"):
        load(env={"FLEETWATCH_DASHBOARD_ALLOWED_HOSTS": "a.com:99999"})


def test_healthz_answers_a_probe_from_any_host_and_nothing_else_does(dashboard):
    """Deploy finding 4 (r22): the dashboard had no health endpoint for a liveness probe."""
    port = dashboard
    assert _get(port, "10.244.3.7:8050", path="/healthz") == (200, b"ok\n")
    assert _get(port, "localhost", path="/healthz") == (200, b"ok\n")
    assert _get(port, "10.244.3.7:8050", path="/")[0] == 421  # the pages still refuse it
