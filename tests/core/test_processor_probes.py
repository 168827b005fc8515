"""The processor's /healthz and /readyz (deploy finding 4, r22): its metrics port answered
the metrics page, 200, on every path, so a readiness probe of /healthz or /ready said yes
while the processor could not reach its broker. Now /healthz says it is alive, /readyz
whether it can work (503 and why), other paths 404."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch import process_service
from fleetwatch.config import load
from fleetwatch.health_http import serve
from fleetwatch.process_health import BusCollector, BusState, Readiness
from tests.servers import free_port, kafka_broker, wait_for


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError as exc:  # not listening yet
        return 0, str(exc)


def test_each_path_answers_what_it_is_and_the_rest_is_404() -> None:
    bus = BusState("kafka-1:9092")
    ready = Readiness(bus)
    registry = CollectorRegistry()
    registry.register(BusCollector(bus))
    port = free_port()
    server = serve("127.0.0.1", port, registry, ready)
    try:
        assert get(port, "/healthz") == (200, "ok\n")
        assert get(port, "/readyz") == (503, "not ready: waiting for Kafka at kafka-1:9092\n")
        status, text = get(port, "/metrics")
        assert status == 200 and "fleetwatch_processor_bus_up 0.0" in text
        for path in ("/", "/ready", "/livez", "/health", "/metrics/x", "/healthz/"):
            assert get(port, path)[0] == 404, path
        bus.set(True)
        assert get(port, "/readyz")[0] == 503  # no processor yet
        owned: set | None = None
        stats = SimpleNamespace(paused=False)
        ready.processor = SimpleNamespace(stats=stats,
                                          ownership=SimpleNamespace(owned=owned))
        assert get(port, "/readyz") == (503, "not ready: joining the consumer group\n")
        ready.processor.ownership.owned = set()  # a spare member: idle, and ready
        assert get(port, "/readyz") == (200, "ready\n")
        stats.paused = True
        assert get(port, "/readyz") == (
            503, "not ready: the store does not answer: consuming is paused until it does\n")
        stats.paused = False
        bus.set(False, "cannot reach Kafka at kafka-1:9092 (Connection refused)")
        assert get(port, "/readyz") == (
            503, "not ready: cannot reach Kafka at kafka-1:9092 (Connection refused)\n")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.kafka
def test_ready_with_its_broker_and_503_once_the_broker_is_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real processor on a real Tansu broker and SQLite store: /readyz 200 once it has
    joined its group, 503 naming Kafka once the broker is stopped, /healthz 200 all along."""
    monkeypatch.setattr(process_service, "_TOPIC_CHECK_S", 0.5)
    broker = kafka_broker(tmp_path).start()
    port = free_port()
    config = load(None, {"FLEETWATCH_BUS_KIND": "kafka",
                         "FLEETWATCH_BUS_BOOTSTRAP": f"127.0.0.1:{broker.port}",
                         "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                         "FLEETWATCH_STORE_PATH": str(tmp_path / "s.db"),
                         "FLEETWATCH_PROCESSOR_METRICS_PORT": str(port)})
    stop = threading.Event()
    codes: list[int] = []
    member = threading.Thread(target=lambda: codes.append(
        process_service.run_processor(config, stop)), daemon=True)
    member.start()
    try:
        wait_for("/readyz is not 200 with the broker up",
                 lambda: get(port, "/readyz")[0] == 200, 60)
        broker.stop()
        wait_for("/readyz is not 503 with the broker stopped",
                 lambda: get(port, "/readyz")[0] == 503, 30)
        status, text = get(port, "/readyz")
        assert status == 503 and f"cannot reach Kafka at 127.0.0.1:{broker.port}" in text
        assert get(port, "/healthz") == (200, "ok\n")
        assert get(port, "/ready")[0] == 404
    finally:
        stop.set()
        member.join(60)
        broker.stop()
    assert codes == [0]
