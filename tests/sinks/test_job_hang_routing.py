"""deploy/alertmanager/alertmanager.yml: a job hung across many nodes raises job_hung on each
node; Alertmanager files them as one group (one page), on the pager, and a GPU alert of one
of those nodes stays in its node's own group."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.store.base import Alert
from tests.servers import alertmanager, wait_for
from tests.sinks.test_alertmanager_routing import CONFIG, receiver_of


def alert(rule: str, node: str, device: str, cluster: str) -> Alert:
    now = time.time()
    return Alert(f"{rule}/{cluster}/{node}/{device}/1", rule, "critical", cluster,
                 f"rack-{node[-2:]}", node, device, "firing", now - 400, now, 300.0,
                 f"job 4000123 hung on {node}", fired_ts=now - 30)


def test_job_hung_goes_to_the_pager() -> None:
    labels = {"alertname": "job_hung", "severity": "critical", "cluster": "c1",
              "rack": "r1", "node": "node-001", "device": "host", "scope": "node"}
    assert receiver_of(labels) == "gpu-ops-pager"


def test_ranks_waiting_for_a_live_rank_go_to_chat_not_the_pager() -> None:
    labels = {"alertname": "job_waiting", "severity": "warning", "cluster": "c1",
              "rack": "r1", "node": "node-001", "device": "host", "scope": "node"}
    assert receiver_of(labels) == "gpu-ops-chat"


def test_a_job_hung_on_32_nodes_is_one_group_in_a_real_alertmanager(tmp_path: Path) -> None:
    config = tmp_path / "alertmanager.yml"
    shutil.copy(CONFIG, config)
    server = alertmanager(tmp_path, config=config).start()
    cluster = f"hang-{time.time_ns()}"
    try:
        sink = AlertmanagerSink(f"http://{server.address}")
        nodes = [f"node-{i:03d}" for i in range(32)]
        sink.send([Notice(alert("job_hung", n, "host", cluster), "") for n in nodes]
                  + [Notice(alert("gpu_stuck", "node-007", "gpu3", cluster), "")])

        def groups() -> list[dict]:
            with urllib.request.urlopen(f"http://{server.address}/api/v2/alerts/groups",
                                        timeout=5) as r:
                return [g for g in json.load(r) if g["labels"].get("cluster") == cluster]

        wait_for("Alertmanager did not group the alerts",
                 lambda: sum(len(g["alerts"]) for g in groups()) == 33, 30, [server.log_path])
        hung = [g for g in groups() if g["labels"].get("alertname") == "job_hung"]
        assert len(hung) == 1 and len(hung[0]["alerts"]) == 32
        assert hung[0]["receiver"]["name"] == "gpu-ops-pager"
        others = [g for g in groups() if g not in hung]
        assert [(g["labels"].get("node"), len(g["alerts"])) for g in others] == [("node-007", 1)]
    finally:
        server.stop()
