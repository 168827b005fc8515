"""A node scaled down (its real agent stopped with SIGTERM) and a node crashed (its agent
killed with SIGKILL), over a real broker and a real ``fleetwatch process``: the stopped
node's last frame says so, the processor records ``node_state`` stopped and pages nobody;
the crashed node is paged ``node_silent`` as before. (The r24 churn run: a clean SIGTERM
paged critical like a crash.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.pipeline.bus.kafka import ensure_topic
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server

pytestmark = pytest.mark.kafka
ALL = ("pending", "firing", "resolved")
SILENT_MIN_S = 5


def spawn(args: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=cwd)


def until(db: Path, done: object, procs: list[subprocess.Popen[bytes]], log: Path,
          timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        store = SqliteStore(db)
        try:
            if done(store):  # type: ignore[operator]
                return
        finally:
            store.close()
        assert all(p.poll() is None for p in procs), log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)


def cluster_env(kafka: Server, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh topic of 2 partitions, an empty SQLite store, and the environment (no
    FLEETWATCH_ variable of the caller's) that points processors and agents at them."""
    run = uuid.uuid4().hex[:8]
    topic, db = f"frames-{run}", tmp_path / "store.db"
    ensure_topic(kafka.address, topic, 2)
    SqliteStore(db).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": topic + ".dead",
                "FLEETWATCH_BUS_GROUP": f"processors-{run}",
                "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                "FLEETWATCH_STORE_PATH": str(db), "FLEETWATCH_PROCESSOR_METRICS_PORT": "0",
                "FLEETWATCH_DETECTORS_SILENT_MIN_S": str(SILENT_MIN_S),
                "FLEETWATCH_AGENT_METRICS_PORT": "0", "FLEETWATCH_NODE_CLUSTER": "c1"})
    return db, env


def test_a_node_stopped_with_sigterm_is_not_paged_a_killed_one_is(
        kafka: Server, tmp_path: Path) -> None:
    db, env = cluster_env(kafka, tmp_path)
    plog = tmp_path / "process.log"
    proc = spawn(["process"], env, plog, tmp_path)
    agents = {}
    for node in ("scaled-1", "crashed-1"):
        spool = tmp_path / f"spool-{node}"
        agents[node] = spawn(["agent", "--fake-gpus", "1", "--interval", "1s"],
                             {**env, "FLEETWATCH_NODE_NODE": node,
                              "FLEETWATCH_AGENT_SPOOL_DIR": str(spool)},
                             tmp_path / f"agent-{node}.log", tmp_path)
    try:
        until(db, lambda s: {p[0].node for p in s.latest("gpu_temp_c", 0)} >= set(agents),
              [proc, *agents.values()], plog)
        time.sleep(3)  # both nodes' intervals known to the processor
        agents["scaled-1"].send_signal(signal.SIGTERM)
        assert agents["scaled-1"].wait(30) == 0
        agents["crashed-1"].send_signal(signal.SIGKILL)
        agents["crashed-1"].wait(30)
        until(db, lambda s: any(a.node == "crashed-1" and a.state == "firing"
                                for a in s.alerts(ALL)), [proc], plog)
        time.sleep(SILENT_MIN_S + 3)  # past the stopped node's limit too
    finally:
        for a in agents.values():
            if a.poll() is None:
                a.kill()
                a.wait(10)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, plog.read_text()[-3000:]
    store = SqliteStore(db)
    try:
        alerts = store.alerts(ALL)
        assert [(a.node, a.rule, a.state) for a in alerts] == [
            ("crashed-1", "node_silent", "firing")]
        states = [(e.node, e.value) for e in store.events(0, time.time() + 60,
                                                          kinds=["node_state"])]
        assert states == [("scaled-1", "stopped"), ("crashed-1", "silent")]
        stopped = store.latest("host_agent_stopped", 0)
        assert [(p[0].node, p[2]) for p in stopped] == [("scaled-1", 1.0)]
        assert "its last frame says so" in (tmp_path / "agent-scaled-1.log").read_text()
    finally:
        store.close()
