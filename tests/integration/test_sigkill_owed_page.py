"""A processor killed (SIGKILL: the OOM killer, a node losing power) after an alert fired
and while its webhook POST was still unanswered: the next processor (the same group, on a
real Tansu broker, the same store: SQLite, VictoriaMetrics) reads the change back as owed
(``queued``, no outcome) and sends it, with the same ``notification_id``. Before, the
record was written only at the outcome, the restarted processor saw nothing owed, and the
page was lost.

What the receiver says it got is counted: the POST the first processor never saw answered,
and the one the second sent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from fleetwatch.pipeline.sinks.notified import settled
from fleetwatch.pipeline.store.base import Notification
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.servers import Server, victoria_metrics

pytestmark = pytest.mark.kafka


class HoldingReceiver:
    """A webhook receiver that holds its first POST unanswered (``held``: what it read of
    it) and answers every later one 200 (``taken``)."""

    def __init__(self) -> None:
        self.held: list[dict] = []
        self.taken: list[dict] = []
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not owner.held:
                    owner.held.append(body)
                    owner.release.wait(60)  # the sender is killed meanwhile
                    code = 503
                else:
                    owner.taken.append(body)
                    code = 200
                try:
                    self.send_response(code)
                    self.end_headers()
                except OSError:
                    pass  # the sender is gone

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def holding() -> Iterator[HoldingReceiver]:
    r = HoldingReceiver()
    yield r
    r.close()


def _firing(bodies: list[dict]) -> list[tuple[str, str]]:
    """(alert id, notification_id) of each firing change in these POSTs."""
    return [(a["id"], a["notification_id"]) for b in bodies for g in b["groups"]
            for a in g["alerts"] if a["state"] == "firing"]


def _recorded_as(store: SqliteStore | VictoriaMetricsStore,
                 want: list[tuple[str, str]]) -> None:
    """Wait until the store's record (as people read it: ``settled``; the muted ones left
    out) is ``want``: VictoriaMetrics makes a new series searchable within seconds."""
    deadline = time.monotonic() + 20
    while True:
        notes: list[Notification] = settled(store.notifications(0, 1e18))
        got = sorted((n.alert_id, n.outcome) for n in notes if n.outcome != "muted")
        if got == sorted(want):
            return
        assert time.monotonic() < deadline, (got, want)
        time.sleep(0.2)


def _wait(check: object, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


@pytest.fixture(params=["sqlite", "victoriametrics"])
def store_env(request: pytest.FixtureRequest, tmp_path: Path
              ) -> Iterator[tuple[dict[str, str], SqliteStore | VictoriaMetricsStore]]:
    """The processors' store settings, and the test's reader of that store."""
    if request.param == "sqlite":
        db = tmp_path / "store.db"
        SqliteStore(db).close()
        reader = SqliteStore(db, read_only=True)
        yield {"FLEETWATCH_STORE_PATH": str(db)}, reader
        reader.close()
        return
    vm = victoria_metrics(tmp_path).start()
    url = f"http://{vm.address}"
    reader = VictoriaMetricsStore(url)
    yield {"FLEETWATCH_STORE_KIND": "victoriametrics", "FLEETWATCH_STORE_URL": url}, reader
    reader.close()
    vm.stop()


def test_a_page_in_flight_when_the_processor_is_killed_is_sent_by_the_next_one(
        kafka: Server, holding: HoldingReceiver,
        store_env: tuple[dict[str, str], SqliteStore | VictoriaMetricsStore],
        tmp_path: Path) -> None:
    settings, store = store_env
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": topic + ".dead",
                "FLEETWATCH_BUS_GROUP": f"g-{run}", "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                **settings, "FLEETWATCH_PROCESSOR_METRICS_PORT": "0",
                "FLEETWATCH_DETECTORS_SITE_TEMP_LIMIT_C": "85",
                "FLEETWATCH_DETECTORS_SITE_TEMP_FOR_S": "0",
                "FLEETWATCH_ALERTS_WEBHOOK_URL": holding.url,
                "FLEETWATCH_ALERTS_SINK_TIMEOUT_S": "30", "PYTHONUNBUFFERED": "1"})

    def start(name: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"],
                                    env=env, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=tmp_path)
        return proc, log

    first, first_log = start("first")
    second = None
    try:
        p = KafkaProducer(kafka.address)
        t0 = time.time()
        for i in range(3):
            f = Frame("c1", "r1", "n1", t0 + i, (GpuReading(0, "GPU-1", "H100",
                                                            {"gpu_temp_c": 95.0}),))
            p.send(topic, encode(f), key=b"n1")
        p.flush(30)
        p.close()
        _wait(lambda: holding.held, first, first_log, 90)  # the page is in flight
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        owed = _firing(holding.held)
        assert owed, holding.held
        # (one muted, gpu_temp_high under the critical alert of its GPU, is not owed)
        _recorded_as(store, [(alert_id, "queued") for alert_id, _ in owed])

        second, second_log = start("second")
        _wait(lambda: len(_firing(holding.taken)) >= len(owed), second, second_log, 90)
        time.sleep(2)  # anything sent twice would come now
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0, second_log.read_text()[-3000:]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    # The receiver has each owed page once from the second processor, with the id the
    # first one's unanswered POST carried (SQLite): one that did get it can drop the repeat.
    taken = _firing(holding.taken)
    assert sorted(alert_id for alert_id, _ in taken) == sorted(a for a, _ in owed), taken
    if isinstance(store, SqliteStore):
        assert sorted(taken) == sorted(owed)
    # (VictoriaMetrics keeps no alert text: the message the digest covers is rebuilt from
    # the labels, so the re-sent change's notification_id is another one there.)
    text = second_log.read_text()
    assert "never delivered there" in text and "sending them now" in text, text[-3000:]
    _recorded_as(store, [(alert_id, "sent") for alert_id, _ in owed])
