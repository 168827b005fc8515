"""The cluster deployment run as systemd runs it: the agent, a processor and the dashboard,
each started with its unit's ExecStart (this checkout's fleetwatch, deploy/cluster.toml as
/etc/fleetwatch/fleetwatch.toml), the per-node file's values as environment, a real Kafka-
protocol broker and a real VictoriaMetrics. Then each is stopped as systemd stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.integration.test_victoria_pipeline import count_samples
from tests.servers import Server, free_port, http_ok, wait_for
from tests.units import UNITS, read_unit

pytestmark = pytest.mark.kafka


def start(unit_name: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """The unit's command, with the unit's working directory replaced by ``cwd`` and
    /etc/fleetwatch/fleetwatch.env replaced by ``env``."""
    unit = read_unit(UNITS / unit_name)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    with open(cwd / f"{unit_name}.log", "ab") as out:
        return subprocess.Popen(unit.local_argv(), env={**clean, **env}, cwd=cwd,
                                stdout=out, stderr=subprocess.STDOUT)


def stop(unit_name: str, proc: subprocess.Popen[bytes], cwd: Path) -> int:
    """As ``systemctl stop``: the unit's KillSignal, then at most TimeoutStopSec."""
    unit = read_unit(UNITS / unit_name)
    proc.send_signal(getattr(signal, unit.get("Service", "KillSignal")))
    try:
        return proc.wait(unit.stop_timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        log = (cwd / f"{unit_name}.log").read_text()[-3000:]
        raise AssertionError(f"{unit_name} did not stop within TimeoutStopSec:\n{log}") from None


def test_the_units_run_the_cluster_and_stop_cleanly(
        kafka: Server, victoria: Server, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    cluster = f"deploy-{run}"
    agent_port, processor_port, dashboard_port = free_port(), free_port(), free_port()
    # What /etc/fleetwatch/fleetwatch.env and the admin's edits of cluster.toml would say
    # on this one machine: its broker, its store, and loopback only (a test binds nothing
    # else).
    env = {
        "FLEETWATCH_NODE_CLUSTER": cluster, "FLEETWATCH_NODE_NODE": f"gpu-{run}",
        "FLEETWATCH_NODE_RACK": "r12",
        "FLEETWATCH_BUS_BOOTSTRAP": kafka.address, "FLEETWATCH_BUS_TOPIC": f"frames-{run}",
        "FLEETWATCH_BUS_GROUP": f"deploy-{run}",
        "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": f"frames-{run}.dead",
        "FLEETWATCH_BUS_ALERT_TOPIC": f"alerts-{run}", "FLEETWATCH_BUS_PARTITIONS": "2",
        "FLEETWATCH_STORE_URL": f"http://{victoria.address}",
        "FLEETWATCH_ALERTS_ALERTMANAGER_URL": "",
        "FLEETWATCH_AGENT_INTERVAL_S": "1", "FLEETWATCH_AGENT_SPOOL_DIR": str(tmp_path / "spool"),
        "FLEETWATCH_AGENT_METRICS_HOST": "127.0.0.1",
        "FLEETWATCH_AGENT_METRICS_PORT": str(agent_port),
        "FLEETWATCH_PROCESSOR_METRICS_HOST": "127.0.0.1",
        "FLEETWATCH_PROCESSOR_METRICS_PORT": str(processor_port),
        "FLEETWATCH_DASHBOARD_PORT": str(dashboard_port),
    }
    logs = [tmp_path / f"fleetwatch-{n}.service.log" for n in ("agent", "process", "dashboard")]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("fleetwatch-process.service", "fleetwatch-agent.service",
                     "fleetwatch-dashboard.service"):
            procs[name] = start(name, env, tmp_path)
        # The agent's frames (host-only here: no GPU) reach the store through the group.
        wait_for("no sample of the agent's node in VictoriaMetrics",
                 lambda: count_samples(victoria.address, cluster) >= 20, 120, logs)
        assert http_ok(f"http://127.0.0.1:{agent_port}/metrics")
        assert http_ok(f"http://127.0.0.1:{processor_port}/metrics")
        wait_for("the dashboard does not answer",
                 lambda: http_ok(f"http://127.0.0.1:{dashboard_port}/_dash-layout"), 60, logs)
        with urllib.request.urlopen(f"http://127.0.0.1:{agent_port}/metrics", timeout=5) as r:
            exported = r.read().decode()
        assert f'Hostname="gpu-{run}"' in exported or f'node="gpu-{run}"' in exported, (
            exported[:2000])
        # On-call's first command on the processor host, against the cluster's store.
        unit = read_unit(UNITS / "fleetwatch-process.service")
        argv = unit.local_argv()
        listed = subprocess.run([*argv[:argv.index("process")], "alerts"], cwd=tmp_path,
                                env={**{k: v for k, v in os.environ.items()
                                        if not k.startswith("FLEETWATCH_")}, **env},
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout == f"no open alerts in victoriametrics at http://{victoria.address}\n"
    finally:
        codes = {name: stop(name, proc, tmp_path) for name, proc in procs.items()}
    assert codes == {name: 0 for name in procs}, codes
