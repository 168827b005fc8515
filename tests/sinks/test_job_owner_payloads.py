"""An alert about a job names whom the job belongs to where the on-call and the routing
look: Alertmanager's ``team`` label (route to the owning team) and ``user``/``team``
annotations, the webhook's ``users`` and ``teams``; nothing where the frames named none."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import urllib.parse
import urllib.request
from pathlib import Path

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink, am_annotations, am_labels
from fleetwatch.pipeline.sinks.base import change_json
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Alert
from tests.servers import alertmanager, wait_for
from tests.sinks.conftest import Receiver
from tests.sinks.test_alertmanager_routing import CONFIG, receiver_of

MESSAGE = "GPU 5 on node-002 (job 4000003, user-02, team multimodal): XID 79"


def xid79(node: str = "node-002", owned: bool = True) -> Alert:
    now = time.time()
    a = Alert(f"gpu_xid_critical/sim/{node}/gpu5/1", "gpu_xid_critical", "critical", "sim",
              "rack-01", node, "gpu5", "firing", now - 60, now, 79.0, MESSAGE,
              fired_ts=now - 60, evidence={"xid": 79.0}, jobs=("4000003",))
    return dataclasses.replace(a, users=("user-02",), teams=("multimodal",)) if owned else a


def test_alertmanager_gets_a_team_label_and_owner_annotations() -> None:
    a = xid79()
    assert am_labels(a)["team"] == "multimodal"
    notes = am_annotations(a)
    assert (notes["user"], notes["team"]) == ("user-02", "multimodal")
    assert notes["description"].startswith(MESSAGE)
    # Unknown: said nowhere, the label set as before.
    bare = xid79(owned=False)
    assert "team" not in am_labels(bare)
    assert "user" not in am_annotations(bare) and "team" not in am_annotations(bare)
    # The team label still routes a GPU alert to the GPU on-call (the shipped config).
    assert receiver_of(am_labels(a)) == "gpu-ops-pager"


def test_the_webhook_change_names_the_users_and_teams() -> None:
    change = change_json(Notice(xid79()))
    assert (change["users"], change["teams"]) == (["user-02"], ["multimodal"])
    bare = change_json(Notice(xid79(owned=False)))
    assert "users" not in bare and "teams" not in bare


def test_a_real_webhook_receiver_gets_the_owner() -> None:
    receiver = Receiver()
    try:
        WebhookSink(receiver.url).send([Notice(xid79())])
        (body,) = receiver.bodies
        (change,) = body["groups"][0]["alerts"]
        assert change["message"] == MESSAGE
        assert (change["users"], change["teams"]) == (["user-02"], ["multimodal"])
    finally:
        receiver.close()


def test_a_real_alertmanager_files_the_alert_with_its_team(tmp_path: Path) -> None:
    config = tmp_path / "alertmanager.yml"
    shutil.copy(CONFIG, config)
    server = alertmanager(tmp_path, config=config).start()
    try:
        node = f"node-owner-{time.time_ns()}"
        AlertmanagerSink(f"http://{server.address}").send([Notice(xid79(node), "")])
        url = (f"http://{server.address}/api/v2/alerts?filter="
               + urllib.parse.quote('team="multimodal"'))

        def filed() -> list[dict]:
            with urllib.request.urlopen(url, timeout=5) as r:
                return [a for a in json.load(r) if a["labels"]["node"] == node]

        wait_for("Alertmanager did not file the alert", filed, 30, [server.log_path])
        (got,) = filed()
        assert got["labels"]["team"] == "multimodal"
        assert (got["annotations"]["user"], got["annotations"]["team"]) == (
            "user-02", "multimodal")
    finally:
        server.stop()
