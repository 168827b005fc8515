"""A processor rolling update over a real broker with real agents: a node whose agent was
stopped with SIGTERM (drained) before the new processor started is not paged by it, while
a node killed meanwhile is (round 25, k8s run: every processor rollout paged every node
drained in the last 7 days)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.integration.test_agent_sigterm_kafka import ALL, SILENT_MIN_S, cluster_env, spawn, until
from tests.servers import Server

pytestmark = pytest.mark.kafka


def test_a_drained_node_is_not_paged_by_the_processor_that_replaces_the_first(
        kafka: Server, tmp_path: Path) -> None:
    db, env = cluster_env(kafka, tmp_path)
    logs = [tmp_path / "process-1.log", tmp_path / "process-2.log"]
    proc = spawn(["process"], env, logs[0], tmp_path)
    agents = {}
    for node in ("drained-1", "alive-1", "crashed-1"):
        agents[node] = spawn(["agent", "--fake-gpus", "1", "--interval", "1s"],
                             {**env, "FLEETWATCH_NODE_NODE": node,
                              "FLEETWATCH_AGENT_SPOOL_DIR": str(tmp_path / f"spool-{node}")},
                             tmp_path / f"agent-{node}.log", tmp_path)
    second = None
    try:
        until(db, lambda s: {p[0].node for p in s.latest("gpu_temp_c", 0)} >= set(agents),
              [proc, *agents.values()], logs[0])
        time.sleep(3)
        agents["drained-1"].send_signal(signal.SIGTERM)
        assert agents["drained-1"].wait(30) == 0
        until(db, lambda s: [p[0].node for p in s.latest("host_agent_stopped", 0)]
              == ["drained-1"], [proc], logs[0])
        # The rolling update: the processor stops, and a node dies while none runs.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, logs[0].read_text()[-3000:]
        agents["crashed-1"].send_signal(signal.SIGKILL)
        agents["crashed-1"].wait(30)
        second = spawn(["process"], env, logs[1], tmp_path)
        until(db, lambda s: any(a.node == "crashed-1" and a.state == "firing"
                                for a in s.alerts(ALL)), [second], logs[1], timeout_s=90)
        time.sleep(SILENT_MIN_S + 3)  # past the drained node's limit from the takeover too
    finally:
        for p in [*agents.values(), proc]:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        if second is not None:
            second.send_signal(signal.SIGTERM)
            assert second.wait(60) == 0, logs[1].read_text()[-3000:]
    store = SqliteStore(db)
    try:
        assert [(a.node, a.rule, a.state) for a in store.alerts(ALL)] == [
            ("crashed-1", "node_silent", "firing")]
    finally:
        store.close()
