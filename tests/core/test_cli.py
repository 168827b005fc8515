from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import free_port


def fleetwatch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleetwatch.cli", *args], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.parametrize("command", ["up", "simulate", "agent", "process", "dashboard", "config"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "usage: fleetwatch " + command in capsys.readouterr().out


def test_bad_config_exits_2_naming_the_key(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "fw.toml"
    bad.write_text('[store]\nkind = "mongo"\n')
    assert main(["--config", str(bad), "config"]) == 2
    assert "store.kind = 'mongo'" in capsys.readouterr().err


def test_bad_fault_spec_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--fault", "cooling:node-001"])
    assert exc.value.code == 2
    assert "expected KIND:NODE/GPU" in capsys.readouterr().err


def test_remote_dashboard_bind_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--host", "0.0.0.0", "--store", "/nonexistent.db"]) == 2
    assert "no authentication" in capsys.readouterr().err


def test_simulate_writes_history_and_ground_truth(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    result = fleetwatch("simulate", "--store", str(db), "--duration", "3h", "--nodes", "2",
                        "--gpus", "4", "--fault", "cooling:node-001/2@1h+30m",
                        env={**os.environ, "FLEETWATCH_SIM_JOB_MEAN_S": "1e9",
                             "FLEETWATCH_SIM_IDLE_MEAN_S": "60"})
    assert result.returncode == 0, result.stderr
    assert "ground truth: cooling on node-001 GPU 2" in result.stderr
    store = SqliteStore(db, read_only=True)
    n = sum(1 for _ in store.export())
    alerts = [(a.node, a.device, a.state) for a in store.alerts(("firing", "resolved"))]
    faults = [(a.node, a.device) for a in store.annotations(0, 1e10)]
    assert n == 3 * 240 * (2 * 4 * 32 + 2 * 5)  # 32 metrics a GPU, 5 a host
    assert alerts and set(alerts) == {("node-001", "gpu2", "resolved")}  # only the faulty GPU
    assert faults == [("node-001", "gpu2")]


def test_busy_port_is_one_clear_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = fleetwatch("dashboard", "--port", str(port), "--store", str(tmp_path / "x.db"))
    assert result.returncode == 1
    assert "already in use" in result.stderr and "Traceback" not in result.stderr


def test_unusable_spool_dir_names_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = fleetwatch("agent", "--fake-gpus", "1", env={
        **os.environ, "FLEETWATCH_BUS_KIND": "kafka",
        "FLEETWATCH_AGENT_METRICS_PORT": str(free_port()),
        "FLEETWATCH_AGENT_SPOOL_DIR": str(blocker / "spool")})
    assert result.returncode == 2
    assert "agent.spool_dir" in result.stderr and "Traceback" not in result.stderr


def test_the_dashboard_serves_until_sigterm_and_exits_cleanly(tmp_path: Path) -> None:
    import signal
    import time
    import urllib.request

    SqliteStore(tmp_path / "x.db").close()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "dashboard", "--port",
                             str(port), "--store", str(tmp_path / "x.db")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
                time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # what systemd sends
        out, _ = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "Traceback" not in out


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    # `fleetwatch config | head -3`: the pipe closes while fleetwatch still writes.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "config"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before it writes: the whole output meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
