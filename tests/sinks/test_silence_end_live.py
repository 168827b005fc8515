"""A maintenance window end to end: a real ``fleetwatch process`` over a real Tansu broker,
a real Alertmanager and a webhook receiver counting what they got.

A silence is made ahead (``silence add --start/--until``): pending, it mutes nothing (an
XID on n2 before it is paged once). Inside it n1 reboots (no frames for a while:
``node_silent``, muted) and is back well before the window ends, its alert held firing by
``alerts.keep_firing_s``. When the window ends, nobody is paged: not n1 (clear again), not
n2's XID (told before the window, unchanged)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server
from tests.sinks.conftest import Receiver
from tests.sinks.test_alertmanager import am_alerts
from tests.sinks.test_am_silences import fw_silences

pytestmark = pytest.mark.kafka


def hooked(receiver: Receiver) -> list[tuple[str, str, str]]:
    """(rule, state, node) of every alert change the webhook received."""
    return [(a["rule"], a["state"], g["node"]) for body in receiver.bodies
            for g in body["groups"] for a in g["alerts"]]  # type: ignore[index]


class Agents:
    """n1 and n2 each send a frame every 0.5 s; n1 stops while ``down`` is set."""

    def __init__(self, producer: KafkaProducer, topic: str) -> None:
        self.producer, self.topic = producer, topic
        self.down, self.stop, self.xid = threading.Event(), threading.Event(), False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for node in ("n1", "n2"):
                if node == "n1" and self.down.is_set():
                    continue
                xids = (79,) if node == "n2" and self.xid else ()
                self.xid = self.xid and node != "n2"
                f = Frame("c1", "r1", node, time.time(), (GpuReading(
                    0, f"GPU-{node}", "H100", {"gpu_temp_c": 50.0}, xids=xids),))
                self.producer.send(self.topic, encode(f), key=node.encode())
            self.producer.flush(10)
            time.sleep(0.5)


def test_a_window_made_ahead_pages_nothing_at_its_end(kafka: Server, am: Server,
                                                       tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 1)
    db = tmp_path / "s.db"
    SqliteStore(db).close()
    receiver = Receiver()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": topic + ".dead",
                "FLEETWATCH_BUS_GROUP": f"g-{run}", "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                "FLEETWATCH_STORE_KIND": "sqlite", "FLEETWATCH_STORE_PATH": str(db),
                "FLEETWATCH_ALERTS_WEBHOOK_URL": receiver.url,
                "FLEETWATCH_ALERTS_ALERTMANAGER_URL": f"http://{am.address}",
                "FLEETWATCH_ALERTS_ALERTMANAGER_RESEND_S": "2",
                "FLEETWATCH_ALERTS_INSTANCE": f"live-{run}",
                "FLEETWATCH_ALERTS_SILENCE_RELOAD_S": "1",
                "FLEETWATCH_ALERTS_KEEP_FIRING_S": "120",
                "FLEETWATCH_DETECTORS_SILENT_MIN_S": "4",
                "FLEETWATCH_PROCESSOR_METRICS_PORT": "0", "PYTHONUNBUFFERED": "1"})
    log = tmp_path / "process.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    agents = Agents(KafkaProducer(kafka.address), topic)
    try:
        agents.thread.start()
        time.sleep(3)
        agents.xid = True                                   # n2: XID 79, paged
        deadline = time.monotonic() + 60
        while ("gpu_xid_critical", "firing", "n2") not in hooked(receiver):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        # The window, made ahead: from 6 s to 40 s from now.
        start = time.time() + 6
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start))
        until = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start + 34))
        assert main(["silence", "--store", str(db), "add", "node=~n1|n2", "--start", stamp,
                     "--until", until, "--by", "alice", "--comment", "reboot n1"]) == 0
        silence_id = capsys.readouterr().out.strip()
        assert main(["silence", "--store", str(db), "list"]) == 0
        assert "pending (starts in" in capsys.readouterr().out

        def mirrored() -> list[dict]:
            return [s for s in fw_silences(am, "n1") if silence_id in s["comment"]]
        # Mirrored at a silence reload (1 s): looked for until the window starts (the
        # stamp is to the second), so that a loaded machine's late reload still sees it
        # pending.
        while not mirrored() and time.time() < int(start) - 0.5:
            time.sleep(0.2)
        (mirror,) = mirrored()
        assert mirror["status"]["state"] == "pending"
        time.sleep(max(0.0, start + 2 - time.time()))       # in the window
        agents.down.set()                                    # n1 reboots
        time.sleep(12)
        agents.down.clear()                                  # back, 20 s before the end
        time.sleep(max(0.0, start + 34 + 10 - time.time()))  # the window ended 10 s ago
        store = SqliteStore(db)
        silent = [a for a in store.alerts(("pending", "firing", "resolved"))
                  if a.rule == "node_silent"]
        record = store.notifications(0, 1e18, alert_ids=[a.id for a in silent])
        store.close()
    finally:
        agents.stop.set()
        agents.thread.join(10)
        agents.producer.close()
        proc.terminate()
        proc.wait(60)
        receiver.close()
    got = hooked(receiver)
    # n1 was silent within the window: the alert fired there, and ended at its first frame
    # back (node_silent is not held by keep_firing_s), before the window's end.
    assert [a.state for a in silent] == ["resolved"], log.read_text()[-3000:]
    assert start <= silent[0].fired_ts and silent[0].resolved_ts < start + 34
    # Muted by the window made ahead, at both sinks, once it had started.
    assert {(r.sink, r.outcome, r.muted_by) for r in record if r.state == "firing"} == {
        ("webhook", "muted", f"silence:{silence_id}"),
        ("alertmanager", "muted", f"silence:{silence_id}")}
    assert all(r.ts >= start for r in record)
    assert ("node_silent", "firing", "n1") not in got, got
    assert got.count(("gpu_xid_critical", "firing", "n2")) == 1, got
    assert [a for a in am_alerts(am, "n1")
            if a["labels"]["alertname"] == "node_silent"] == []
