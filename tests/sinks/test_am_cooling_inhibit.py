"""A real Alertmanager with the shipped inhibit rules: a critical rack cooling alert mutes
its rack's GPU thermal alerts, not an XID 79 or an ECC DBE of the rack (postmortem D3)."""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request
from pathlib import Path

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.store.base import Alert
from tests.servers import alertmanager, wait_for
from tests.sinks.test_alertmanager_routing import CONFIG


def test_a_real_alertmanager_mutes_a_racks_thermal_alerts_not_its_hardware_errors(
        tmp_path: Path) -> None:
    config = tmp_path / "alertmanager.yml"
    shutil.copy(CONFIG, config)
    server = alertmanager(tmp_path, config=config).start()
    try:
        cluster, now = f"c-rack-{time.time_ns()}", time.time()

        def of(rule: str, node: str, device: str, severity: str = "critical") -> Alert:
            return Alert(f"{rule}/{cluster}/{node}/{device}/1", rule, severity, cluster, "r1",
                         node, device, "firing", now - 60, now, 1.0, rule, fired_ts=now - 30)

        sent = [of("gpu_temp_high", "n1", "gpu0", "warning"), of("gpu_xid_critical", "n1", "gpu4"),
                of("gpu_ecc_dbe", "n2", "gpu1"), of("node_cooling", "n2", "host"),
                of("rack_cooling", "", "rack:r1")]
        AlertmanagerSink(f"http://{server.address}").send([Notice(a, "") for a in sent])
        url = (f"http://{server.address}/api/v2/alerts?filter="
               + urllib.parse.quote(f'cluster="{cluster}"'))

        def states() -> dict[str, str] | None:
            with urllib.request.urlopen(url, timeout=5) as r:
                got = {a["labels"]["alertname"]: a["status"]["state"] for a in json.load(r)}
            return got if len(got) == 5 and got["gpu_temp_high"] == "suppressed" else None

        wait_for("Alertmanager did not inhibit the rack's thermal alert", states, 30,
                 [server.log_path])
        assert states() == {"gpu_temp_high": "suppressed", "node_cooling": "suppressed",
                            "gpu_xid_critical": "active", "gpu_ecc_dbe": "active",
                            "rack_cooling": "active"}
    finally:
        server.stop()
