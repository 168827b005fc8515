"""``fleetwatch process`` started before its broker: it waits, says so once an attempt, and
stops at once on SIGTERM; once the broker is there it runs, without kafka-python's lines.

A processor that died after a minute with two chained tracebacks, when the broker was
not up yet, was restarted by its service manager into the same minute again.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fleetwatch import process_service
from fleetwatch.pipeline.bus import BusError
from fleetwatch.service import kafka_unreachable, reach_kafka
from tests.servers import free_port, kafka_broker


def start_process(tmp_path: Path, bootstrap: str, *args: str,
                  env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env = {**clean, "FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": bootstrap,
           "FLEETWATCH_STORE_PATH": str(tmp_path / "store.db"),
           "FLEETWATCH_PROCESSOR_METRICS_PORT": str(free_port()),
           "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6", "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process", *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def read_until(proc: subprocess.Popen[str], pattern: str, lines: list[str],
               timeout_s: float = 60) -> None:
    """Append the process's lines to ``lines`` until one matches ``pattern``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    found = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if re.search(pattern, line):
                found.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(max(0.0, deadline - time.monotonic()))
    assert found.is_set(), f"{pattern!r} not seen:\n{''.join(lines)}"


def stop(proc: subprocess.Popen[str], lines: list[str]) -> tuple[int, float]:
    """SIGTERM; the exit status and how long it took."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    lines.append(out)
    return proc.returncode, time.monotonic() - t0


def kafka_client_lines(lines: list[str]) -> list[str]:
    """Lines logged by kafka-python's own loggers (``... INFO kafka.net.selector: ...``)."""
    return [line for line in lines if re.search(r" (DEBUG|INFO|WARNING|ERROR) kafka[.:]", line)]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_without_a_broker_it_waits_saying_so_and_sigterm_ends_it_at_once(
        tmp_path: Path, workers: str) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    proc = start_process(tmp_path, address, "--workers", workers)
    lines: list[str] = []
    try:
        for _ in range(3):  # one line per attempt, further apart each time
            read_until(proc, rf"cannot reach Kafka at {re.escape(address)} \(.+\); will "
                             r"retry in \d+ s", lines, 30)
        code, took = stop(proc, lines)
    finally:
        proc.kill()
    out = "".join(lines)
    assert code == 0, out
    assert took < 5, out
    assert "Traceback" not in out and "BusError" not in out, out
    assert "while waiting for Kafka" in out, out
    assert not kafka_client_lines(lines), out
    waits = [int(w) for w in re.findall(r"will retry in (\d+) s", out)]
    assert waits == sorted(waits) and waits[-1] > waits[0], waits  # backoff


def scrape(port: int) -> dict[str, float]:
    """The processor's /metrics: each fleetwatch sample's name (with labels) and value."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {s.name + (str(sorted(s.labels.items())) if s.labels else ""): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name.startswith("fleetwatch_processor")}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_waiting_for_its_broker_it_exports_its_series_at_zero_and_bus_down(
        tmp_path: Path, workers: str) -> None:
    """Deploy finding 1 (r22): a processor waiting for an unreachable broker answered
    /metrics with no fleetwatch series, so no shipped rule (NothingConsumed: sums of
    partitions_owned and frames_total) could fire. Now they are there, at 0, and
    fleetwatch_processor_bus_up is 0."""
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    port = free_port()
    proc = start_process(tmp_path, address, "--workers", workers,
                         env={"FLEETWATCH_PROCESSOR_METRICS_PORT": str(port)})
    lines: list[str] = []
    try:
        read_until(proc, "cannot reach Kafka at", lines, 30)
        seen = scrape(port)
        from tests.core.test_processor_probes import get

        readyz, healthz = get(port, "/readyz"), get(port, "/healthz")
        stop(proc, lines)
    finally:
        proc.kill()
    assert seen["fleetwatch_processor_bus_up"] == 0, seen
    assert seen["fleetwatch_processor_partitions_owned"] == 0, seen
    assert seen["fleetwatch_processor_frames_total"] == 0, seen
    assert seen["fleetwatch_processor_samples_total"] == 0, seen
    assert seen["fleetwatch_processor_paused"] == 0, seen
    assert [k for k in seen if k.startswith("fleetwatch_processor_info")], seen
    assert readyz == (503, f"not ready: waiting for Kafka at {address}\n"), readyz
    assert healthz == (200, "ok\n")


@pytest.mark.kafka
def test_a_broker_that_comes_later_is_reached_and_its_client_stays_quiet(
        tmp_path: Path) -> None:
    port = free_port()
    proc = start_process(tmp_path, f"127.0.0.1:{port}")
    broker = kafka_broker(tmp_path, port)
    lines: list[str] = []
    try:
        read_until(proc, "cannot reach Kafka at", lines, 30)
        broker.start()
        read_until(proc, r"reached Kafka at 127\.0\.0\.1:\d+ after \d+ failed attempt", lines)
        read_until(proc, "partitions assigned", lines)
        code, _ = stop(proc, lines)
    finally:
        proc.kill()
        broker.stop()
    out = "".join(lines)
    assert code == 0, out
    assert "topic fleetwatch.frames has" in out and "Traceback" not in out, out
    # Its topic checks open admin clients, its consumer joins a group: kafka-python logged
    # each connection at INFO (about 114 lines a minute), none of which may show.
    assert not kafka_client_lines(lines), "\n".join(kafka_client_lines(lines)[:10])


def test_reach_kafka_retries_with_backoff_until_stopped(
        caplog: pytest.LogCaptureFixture) -> None:
    address = f"127.0.0.1:{free_port()}"
    assert kafka_unreachable(address) == "Connection refused"
    stop = threading.Event()
    threading.Timer(1.2, stop.set).start()
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, "fleetwatch"):
        assert reach_kafka(address, stop, first_s=0.2, max_s=0.4) is None
    assert time.monotonic() - t0 < 2.0
    said = [r.getMessage() for r in caplog.records]
    assert len(said) >= 3 and all(f"cannot reach Kafka at {address}" in m for m in said), said


def test_reach_kafka_counts_a_refused_client_as_an_attempt(
        caplog: pytest.LogCaptureFixture) -> None:
    import socket

    with socket.socket() as listening:  # it takes the connection, but is no Kafka
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        calls = []

        def connect() -> str:
            calls.append(1)
            if len(calls) < 3:
                raise BusError(f"cannot reach Kafka at {address}: KafkaTimeoutError: no answer")
            return "consumer"

        with caplog.at_level(logging.INFO, "fleetwatch"):
            assert reach_kafka(address, threading.Event(), connect, 0.05, 0.1) == "consumer"
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith(f"cannot reach Kafka at {address} (KafkaTimeoutError: no answer)")
    assert said[-1] == f"reached Kafka at {address} after 2 failed attempts"


def test_the_topic_watch_says_once_when_kafka_goes_and_once_when_it_is_back(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from fleetwatch.config import load

    states = iter(["Connection refused"] * 3 + [None] * 2)
    checked = []
    stop = threading.Event()

    def unreachable(bootstrap: str) -> str | None:
        state = next(states, None)
        if state is None and len(checked) >= 2:
            stop.set()
        return state

    monkeypatch.setattr(process_service, "_TOPIC_CHECK_S", 0.01)
    monkeypatch.setattr(process_service, "kafka_unreachable", unreachable)
    monkeypatch.setattr(process_service, "_ensure_topics",
                        lambda config, quiet=False: checked.append(quiet))
    config = load(None, {"FLEETWATCH_BUS_KIND": "kafka",
                         "FLEETWATCH_BUS_BOOTSTRAP": "127.0.0.1:9"})
    from fleetwatch.process_health import BusState

    bus = BusState("127.0.0.1:9")
    with caplog.at_level(logging.INFO, "fleetwatch"):
        process_service._watch_topics(config, stop, bus)
    assert bus.up and not bus.reason  # followed: back at the end
    said = [r.getMessage() for r in caplog.records]
    assert said == ["cannot reach Kafka at 127.0.0.1:9 (Connection refused); consuming resumes "
                    "when it is back", "Kafka at 127.0.0.1:9 can be reached again"], said
    assert checked and all(checked)  # checked again, quietly, only while it is there
