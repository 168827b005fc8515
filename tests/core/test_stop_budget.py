"""One deadline for a processor's whole stop (deploy finding 5, r22): each step gets what
is left of ``processor.stop_timeout_s`` from the stop request; a step cut short is logged
and named."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest

from fleetwatch.config import load
from fleetwatch.process_stop import StopBudget


class HungFlush:
    """A processor whose last alert updates wait on a store that never answers."""

    def __init__(self) -> None:
        self.alerts = SimpleNamespace(unwritten=lambda: ["a1", "a2"])
        self.release = threading.Event()

    def flush(self) -> int:
        self.release.wait(30)
        return 0


class Sinks:
    """Alertmanager still waited on when the time given runs out (one change given up)."""

    def __init__(self) -> None:
        self.stats = SimpleNamespace(sinks={"alertmanager": SimpleNamespace(
            failed=0, last_error="", close_error="")})
        self.given: list[float] = []

    def close(self, timeout_s: float) -> list[str]:
        self.given.append(timeout_s)
        time.sleep(min(timeout_s, 0.2))
        counts = self.stats.sinks["alertmanager"]
        counts.failed += 1
        counts.last_error = "1 alert changes not delivered (still waiting for the sink after 2s)"
        return ["alertmanager"]


def test_each_step_gets_what_is_left_and_what_is_cut_is_said(
        caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    budget = StopBudget(stop, 10.0)
    stop.set()
    time.sleep(0.05)
    assert 4.4 <= budget.drain_s() <= 4.5  # its share, at most 20 s
    processor, sinks = HungFlush(), Sinks()
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, "fleetwatch"):
        budget.flush(processor)
        budget.close_sinks(sinks)
    took = time.monotonic() - t0
    processor.release.set()
    assert 7.5 < took < 10.0, took  # flush cut at what is left but the sinks' 2 s
    assert 1.5 < sinks.given[0] <= 2.1, sinks.given
    assert budget.abandoned[0].startswith("the last updates of 2 open alerts (the store did "
                                          "not answer within 8 s")
    assert budget.abandoned[1].startswith("alert changes to sink alertmanager (still waiting "
                                          "for it after 2 s")
    said = [r.getMessage() for r in caplog.records]
    assert said and "processor.stop_timeout_s = 10 s" in said[0]


def test_a_drain_that_starts_late_gets_only_what_is_left() -> None:
    stop = threading.Event()
    budget = StopBudget(stop, 5.0)
    stop.set()
    time.sleep(3.0)  # the loop noticed the request late
    assert 0.5 <= budget.drain_s() <= 1.05  # 5 - 3 - the sinks' 1 s


def test_the_default_fits_systemds_and_kubernetes_60_s() -> None:
    assert load(None, {}).processor.stop_timeout_s == 45.0


def test_the_units_and_the_pods_wait_longer_than_the_stop_takes() -> None:
    """Workers are killed 3 s after the budget: systemd and Kubernetes wait longer still."""
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "deploy"
    budget = load(root / "cluster.toml", {"FLEETWATCH_NODE_CLUSTER": "dc1"}
                  ).processor.stop_timeout_s + 3
    unit = (root / "systemd" / "fleetwatch-process.service").read_text("utf-8")
    assert float(re.search(r"^TimeoutStopSec=(\d+)", unit, re.M).group(1)) > budget
    docs = yaml.safe_load_all((root / "kubernetes" / "fleetwatch.yaml").read_text("utf-8"))
    (processor,) = [d for d in docs if d["metadata"]["name"] == "fleetwatch-processor"]
    assert processor["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > budget


def test_a_thread_hung_on_a_server_does_not_hold_the_exit() -> None:
    """A store write abandoned at the deadline kept the interpreter from exiting until the
    write's own timeout; ``leave`` exits after a second, saying which thread it left."""
    import subprocess
    import sys

    code = ("import threading, time, logging\n"
            "logging.basicConfig()\n"
            "from fleetwatch.process_stop import leave\n"
            "threading.Thread(target=time.sleep, args=(60,), name='store-writer_0').start()\n"
            "raise SystemExit(leave(0))\n")
    t0 = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=30)
    assert time.monotonic() - t0 < 10
    assert result.returncode == 0
    assert "exiting without waiting for store-writer_0" in result.stderr


# -- what the stop line blames (r23): a sink that fails at close is not the deadline's fault --
def _alert(name: str):
    from fleetwatch.pipeline.store.base import Alert
    return Alert(f"gpu_temp_high/c/n1/gpu0/{name}", "gpu_temp_high", "critical", "c", "r1",
                 "n1", "gpu0", "firing", 970.0, 1000.0, 91.0, f"{name} at 91 °C",
                 fired_ts=1000.0)


class Hangs:
    """A webhook that takes the alert changes and never answers."""

    name, notify_only, timeout_s = "webhook", True, 30.0

    def __init__(self) -> None:
        self.release = threading.Event()

    def send(self, changes: object) -> None:
        self.release.wait(30)

    def close(self) -> None:
        pass


class BreaksAtClose:
    """A sink that delivers but fails to close (a Kafka producer's flush that times out)."""

    name, notify_only = "kafka", False

    def send(self, changes: object) -> None:
        pass

    def close(self) -> None:
        raise RuntimeError("KafkaTimeoutError: flush timed out after 5.0 secs")


def _close(budget: StopBudget, notifier: object, caplog: pytest.LogCaptureFixture) -> str:
    with caplog.at_level(logging.WARNING, "fleetwatch"):
        budget.close_sinks(notifier)
    return "\n".join(r.getMessage() for r in caplog.records)


def test_a_sink_that_fails_at_close_is_named_with_its_error_not_the_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    from fleetwatch.pipeline.sinks import Notifier
    from fleetwatch.pipeline.sinks.webhook import WebhookSink
    from fleetwatch.retry import Backoff
    from tests.servers import free_port

    stop = threading.Event()
    budget = StopBudget(stop, 10.0)
    url = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens: refused at once
    notifier = Notifier([WebhookSink(url, timeout_s=1.0), BreaksAtClose()], attempts=1,
                        backoff=lambda: Backoff(30.0, 30.0))
    notifier.send([_alert("a0")])
    time.sleep(0.5)  # tried, refused, held for a retry
    stop.set()
    t0 = time.monotonic()
    said = _close(budget, notifier, caplog)
    assert time.monotonic() - t0 < 5.0  # the last try failed at once: no deadline reached
    assert budget.abandoned == []
    (webhook, kafka) = budget.failed
    assert webhook.startswith("alert sink webhook: 1 alert changes not delivered (the last "
                              "try at close failed; last error: webhook "), webhook
    assert "unreachable" in webhook and "Connection refused" in webhook, webhook
    assert kafka == ("alert sink kafka: closing it failed: KafkaTimeoutError: flush timed "
                     "out after 5.0 secs")
    assert "stop_timeout_s" not in said and "stop_timeout_s" not in budget.summary()
    assert budget.summary() == f"; failed at stop: {webhook}; {kafka}"


def test_a_sink_still_trying_at_the_deadline_is_named_with_the_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    from fleetwatch.pipeline.sinks import Notifier

    stop = threading.Event()
    budget = StopBudget(stop, 2.0)
    hangs = Hangs()
    notifier = Notifier([hangs], attempts=1)
    try:
        notifier.send([_alert("a0")])
        time.sleep(0.2)
        stop.set()
        said = _close(budget, notifier, caplog)
    finally:
        hangs.release.set()
    assert budget.failed == []
    (cut,) = budget.abandoned
    assert cut.startswith("alert changes to sink webhook (still waiting for it after 2 s"), cut
    assert "processor.stop_timeout_s = 2 s" in said
    assert budget.summary() == ("; abandoned to stop within processor.stop_timeout_s = 2 s: "
                                f"{cut}")
