"""Two real ``fleetwatch process`` members over Tansu, one without the webhook.

The SRE's case: a host whose environment file lacks FLEETWATCH_ALERTS_WEBHOOK_URL joins
the group and takes over a third of the fleet's pages. Both members must say so in their
log soon after joining (each naming the other by host and pid, and the part that
differs), and on /metrics (``fleetwatch_processor_group_members_differing``), while
``fleetwatch_processor_info`` tells them apart by its ``alert_sinks`` label.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fleetwatch.pipeline.bus.kafka import ensure_topic
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.bus.test_processor_info import scrape
from tests.servers import Server, free_port, wait_for

pytestmark = pytest.mark.kafka


def start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"],
                                env={**clean, **env}, stdout=out, stderr=subprocess.STDOUT,
                                cwd=log.parent)


def differing(port: int) -> dict[str, float]:
    return {s.labels["part"]: s.value
            for s in scrape(port).get("fleetwatch_processor_group_members_differing", [])}


def test_a_member_without_the_webhook_is_named_by_both_members(kafka: Server,
                                                               tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, group = f"frames-{run}", f"processors-{run}"
    ensure_topic(kafka.address, topic, 4)
    db = tmp_path / "store.db"
    SqliteStore(db).close()
    env = {"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
           "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": f"{topic}.dead",
           "FLEETWATCH_BUS_ALERT_TOPIC": f"{topic}.alerts", "FLEETWATCH_BUS_GROUP": group,
           "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6", "FLEETWATCH_STORE_KIND": "sqlite",
           "FLEETWATCH_STORE_PATH": str(db), "FLEETWATCH_MODELS_ENABLED": "false"}
    ports = [free_port(), free_port()]
    logs = [tmp_path / "with-hook.log", tmp_path / "no-hook.log"]
    procs = [start({**env, "FLEETWATCH_ALERTS_WEBHOOK_URL": "http://127.0.0.1:9/hook",
                    "FLEETWATCH_PROCESSOR_METRICS_PORT": str(ports[0])}, logs[0])]
    try:
        wait_for("the first member's /metrics", lambda: differing(ports[0]) != {},
                 timeout_s=60, logs=logs[:1])
        procs.append(start({**env, "FLEETWATCH_PROCESSOR_METRICS_PORT": str(ports[1])},
                           logs[1]))
        wait_for("both members to see the other's alert sinks differ",
                 lambda: all(differing(p).get("alert_sinks") == 1 for p in ports),
                 timeout_s=90, logs=logs)
        assert all(differing(p)["detectors"] == 0 == differing(p)["store"] for p in ports)
        infos = [scrape(p)["fleetwatch_processor_info"][0].labels for p in ports]
        assert infos[0]["alert_sinks"] != infos[1]["alert_sinks"]
        assert infos[0]["detectors"] == infos[1]["detectors"]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
    host = socket.gethostname()
    for mine, other in ((0, 1), (1, 0)):
        text = logs[mine].read_text()
        lines = [ln for ln in text.splitlines() if "WARNING" in ln and "alert settings" in ln]
        assert lines, text[-3000:]
        assert f"consumer group {group}: 1 other member(s) ({host} pid {procs[other].pid})" \
            in lines[0]
        assert f"than this member ({host} pid {procs[mine].pid})" in lines[0]
        assert "9/hook" not in text  # the URL itself is never logged
