"""The agent's rack from its Kubernetes node label, read as an in-cluster client reads it.

A local HTTPS server stands in for the API server, with a certificate made here
by ``openssl`` that the test's service-account directory holds as its CA, and a
token it checks: the request, its TLS verification and its authorization are
the real ones; only the server's answers are ours.
"""

from __future__ import annotations

import json
import logging
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleetwatch.collectors.kube_node import KubeApiError, node_labels, rack_from_label

TOKEN = "sa-token-123"
NODES = {"gpu-017": {"fleetwatch.io/rack": "r12", "kubernetes.io/hostname": "gpu-017"},
         "gpu-018": {"kubernetes.io/hostname": "gpu-018"}}


class ApiServer(BaseHTTPRequestHandler):
    forbidden = False
    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        name = self.path.removeprefix("/api/v1/nodes/")
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._answer(401, {"kind": "Status", "reason": "Unauthorized"})
        if self.forbidden:
            return self._answer(403, {"kind": "Status", "reason": "Forbidden"})
        if not self.path.startswith("/api/v1/nodes/") or name not in NODES:
            return self._answer(404, {"kind": "Status", "reason": "NotFound"})
        self._answer(200, {"kind": "Node", "metadata": {"name": name, "labels": NODES[name]}})

    def _answer(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """(the pod's environment, its service-account directory) for a running API server."""
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(sa / "ca.crt"),
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    (sa / "token").write_text(TOKEN + "\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), ApiServer)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(sa / "ca.crt", tmp_path / "key.pem")
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    ApiServer.forbidden, ApiServer.seen = False, []
    try:
        yield ({"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(server.server_address[1])}, sa)
    finally:
        server.shutdown()
        server.server_close()


def test_the_rack_is_the_nodes_label_read_over_verified_tls_with_the_token(api) -> None:
    env, sa = api
    assert rack_from_label("gpu-017", "fleetwatch.io/rack", "rack0", env=env,
                           service_account=sa) == "r12"
    assert ApiServer.seen == [("/api/v1/nodes/gpu-017", f"Bearer {TOKEN}")]


def test_a_node_without_the_label_keeps_the_configured_rack_and_says_how_to_label_it(
        api, caplog) -> None:
    env, sa = api
    with caplog.at_level(logging.WARNING, logger="fleetwatch.collectors.kube_node"):
        rack = rack_from_label("gpu-018", "fleetwatch.io/rack", "rack0", env=env,
                               service_account=sa)
    assert rack == "rack0"
    assert "kubectl label node gpu-018 fleetwatch.io/rack=RACK" in caplog.text


@pytest.mark.parametrize("case, expect", [
    ("forbidden", "HTTP 403: the service account may not get nodes"),
    ("unknown node", "HTTP 404: no node named 'gpu-999'"),
    ("bad token", "HTTP 401: the token was refused"),
    ("other CA", "CERTIFICATE_VERIFY_FAILED"),
    ("not in a pod", "not in a Kubernetes pod"),
])
def test_an_api_that_cannot_answer_is_named_and_the_agent_keeps_its_rack(
        api, tmp_path: Path, caplog, case: str, expect: str) -> None:
    env, sa = api
    node = "gpu-999" if case == "unknown node" else "gpu-017"
    if case == "forbidden":
        ApiServer.forbidden = True
    if case == "bad token":
        (sa / "token").write_text("stolen")
    if case == "other CA":
        other = tmp_path / "other"
        other.mkdir()
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "2", "-keyout", str(other / "k.pem"), "-out", str(other / "ca.crt"),
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        (other / "token").write_text(TOKEN)
        sa = other
    if case == "not in a pod":
        env = {}
    with pytest.raises(KubeApiError, match=expect.replace("(", r"\(")):
        node_labels(node, env=env, service_account=sa)
    with caplog.at_level(logging.WARNING, logger="fleetwatch.collectors.kube_node"):
        assert rack_from_label(node, "fleetwatch.io/rack", "rack0", env=env,
                               service_account=sa) == "rack0"
    assert expect in caplog.text and "using node.rack = 'rack0'" in caplog.text


def test_the_agents_frames_carry_the_rack_of_its_node_label(api, monkeypatch, capsys) -> None:
    from fleetwatch.cli import main
    from fleetwatch.collectors import kube_node

    env, sa = api
    monkeypatch.setattr(kube_node, "SERVICE_ACCOUNT", sa)
    for name, value in {**env, "FLEETWATCH_NODE_NODE": "gpu-017",
                        "FLEETWATCH_NODE_RACK_LABEL": "fleetwatch.io/rack"}.items():
        monkeypatch.setenv(name, value)
    assert main(["agent", "--fake-gpus", "2", "--once", "--json"]) == 0
    frame = json.loads(capsys.readouterr().out)
    assert (frame["node"], frame["rack"]) == ("gpu-017", "r12")
