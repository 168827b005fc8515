"""deploy/alertmanager/alertmanager.yml: Alertmanager accepts it, routes fleetwatch's GPU
alerts and Prometheus's alerts about fleetwatch where it says, and a real Alertmanager
started with it files an alert that fleetwatch's sink posts under the expected receiver."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink, am_labels
from fleetwatch.pipeline.store.base import Alert
from tests.servers import alertmanager, wait_for

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
RULES = ROOT / "deploy" / "prometheus" / "fleetwatch-rules.yml"


def amtool(*args: str) -> str:
    binary = shutil.which("amtool")
    assert binary, "no amtool: `apt-get install prometheus-alertmanager` (scripts/test does this)"
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def receiver_of(labels: dict[str, str]) -> str:
    return amtool("config", "routes", "test", f"--config.file={CONFIG}",
                  *(f"{k}={v}" for k, v in labels.items()))


def alert(rule: str, severity: str, node: str = "node-007", device: str = "gpu3") -> Alert:
    now = time.time()
    return Alert(f"{rule}/c1/{node}/{device}/1", rule, severity, "c1", "r2", node, device,
                 "firing", now - 60, now, 1.0, f"{rule} on {node}", fired_ts=now - 30)


def test_alertmanager_accepts_the_configuration() -> None:
    assert "SUCCESS" in amtool("check-config", str(CONFIG))


@pytest.mark.parametrize(("rule", "severity", "receiver"), [
    ("xid", "critical", "gpu-ops-pager"),                  # an XID 79: drain the node
    ("gpu_hot_vs_peers_critical", "critical", "gpu-ops-pager"),
    ("node_silent", "critical", "gpu-ops-pager"),
    ("gpu_hot_vs_peers", "warning", "gpu-ops-chat"),
    ("xid", "info", "gpu-ops-chat"),                       # XID 13 or 43: the application's
])
def test_fleetwatch_alerts_go_to_the_gpu_on_call(rule: str, severity: str,
                                                 receiver: str) -> None:
    # The labels exactly as fleetwatch's Alertmanager sink posts them.
    assert receiver_of(am_labels(alert(rule, severity))) == receiver


def test_every_alert_about_fleetwatch_itself_goes_to_whoever_runs_it() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    # Every rule of the shipped file, however many there are (a new one must route too).
    assert len(rules) == 33 and len({r["alert"] for r in rules}) == len(rules)
    for r in rules:
        severity = r["labels"]["severity"]
        expected = "platform-pager" if severity == "critical" else "platform-chat"
        assert receiver_of({"alertname": r["alert"], "severity": severity}) == expected, r


def test_a_real_alertmanager_files_a_posted_alert_under_its_receiver(tmp_path: Path) -> None:
    config = tmp_path / "alertmanager.yml"
    shutil.copy(CONFIG, config)
    server = alertmanager(tmp_path, config=config).start()
    try:
        node = f"node-route-{time.time_ns()}"
        sink = AlertmanagerSink(f"http://{server.address}")
        sink.send([Notice(alert("gpu_hot_vs_peers_critical", "critical", node=node), "")])
        url = (f"http://{server.address}/api/v2/alerts?filter="
               + urllib.parse.quote(f'node="{node}"'))

        def filed() -> list[dict]:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)

        wait_for("Alertmanager did not file the alert", filed, 30, [server.log_path])
        (got,) = filed()
        assert [r["name"] for r in got["receivers"]] == ["gpu-ops-pager"]
    finally:
        server.stop()


def test_a_real_alertmanager_inhibits_a_gpus_warning_under_its_critical(tmp_path: Path) -> None:
    """Both posted (the warning fired first, the critical later): Alertmanager, with the
    shipped inhibit rules, mutes the warning of the same GPU and family only."""
    config = tmp_path / "alertmanager.yml"
    shutil.copy(CONFIG, config)
    server = alertmanager(tmp_path, config=config).start()
    try:
        node = f"node-family-{time.time_ns()}"
        sink = AlertmanagerSink(f"http://{server.address}")
        sink.send([Notice(alert("gpu_temp_high", "warning", node=node), ""),
                   Notice(alert("gpu_temp_high", "warning", node=node, device="gpu4"), ""),
                   Notice(alert("gpu_sw_thermal_slowdown", "warning", node=node), "")])
        sink.send([Notice(alert("gpu_temp_critical", "critical", node=node), ""),
                   Notice(alert("gpu_hw_slowdown", "critical", node=node), "")])
        url = (f"http://{server.address}/api/v2/alerts?filter="
               + urllib.parse.quote(f'node="{node}"'))

        def muted() -> dict[tuple[str, str], bool]:
            with urllib.request.urlopen(url, timeout=5) as r:
                got = json.load(r)
            out = {(a["labels"]["alertname"], a["labels"]["device"]):
                   bool(a["status"]["inhibitedBy"]) for a in got}
            return out if len(out) == 5 and sum(out.values()) == 2 else {}

        wait_for("Alertmanager did not inhibit the warnings", muted, 30, [server.log_path])
        assert muted() == {("gpu_temp_high", "gpu3"): True, ("gpu_temp_high", "gpu4"): False,
                           ("gpu_sw_thermal_slowdown", "gpu3"): True,
                           ("gpu_temp_critical", "gpu3"): False,
                           ("gpu_hw_slowdown", "gpu3"): False}
    finally:
        server.stop()


def test_a_real_alertmanager_mutes_gpu_thermal_alerts_under_a_warm_room_not_peer_alerts(
        tmp_path: Path) -> None:
    """A GPU thermal alert posted before the room's alert fired is re-sent while it fires:
    the shipped inhibit rule mutes it once the room's alert is there; the GPU's own
    peer alert (hotter than its peers) still pages."""
    config = tmp_path / "alertmanager.yml"
    shutil.copy(CONFIG, config)
    server = alertmanager(tmp_path, config=config).start()
    try:
        cluster = f"c-room-{time.time_ns()}"
        now = time.time()

        def of(a: Alert) -> Alert:
            return Alert(a.id.replace("/c1/", f"/{cluster}/"), a.rule, a.severity, cluster,
                         a.rack, a.node, a.device, "firing", now - 60, now, 1.0, a.message,
                         fired_ts=now - 30)

        room = of(Alert("room_inlet_hot/c1//rack:*/1", "room_inlet_hot", "warning", "c1", "*",
                        "", "rack:*", "firing", 0, 0, 30.0, "room"))
        hot = of(alert("gpu_temp_critical", "critical"))
        peer = of(alert("gpu_hot_vs_peers_critical", "critical"))
        AlertmanagerSink(f"http://{server.address}").send(
            [Notice(a, "") for a in (hot, peer, room)])
        url = (f"http://{server.address}/api/v2/alerts?filter="
               + urllib.parse.quote(f'cluster="{cluster}"'))

        def states() -> dict[str, str] | None:
            with urllib.request.urlopen(url, timeout=5) as r:
                got = {a["labels"]["alertname"]: a["status"]["state"] for a in json.load(r)}
            return got if len(got) == 3 and got["gpu_temp_critical"] == "suppressed" else None

        wait_for("Alertmanager did not inhibit the GPU's thermal alert", states, 30,
                 [server.log_path])
        assert states() == {"gpu_temp_critical": "suppressed", "room_inlet_hot": "active",
                            "gpu_hot_vs_peers_critical": "active"}
    finally:
        server.stop()
