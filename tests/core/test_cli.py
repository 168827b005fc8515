from __future__ import annotations

import os
import re
import subprocess
import sys
import time
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


def test_config_refuses_an_unknown_detector_as_start_up_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Users check a file with `fleetwatch config` before deploying it: a misspelt detector
    passed there (exit 0) and stopped `up` and `process` (exit 2)."""
    bad = tmp_path / "fw.toml"
    bad.write_text('[detectors]\nenabled = ["xdi"]\n')
    assert main(["--config", str(bad), "config"]) == 2
    err = capsys.readouterr().err
    assert "unknown detector(s) 'xdi'" in err and "xid" in err


def test_simulate_refuses_an_end_in_the_future(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--end", str(int(time.time()) + 7300)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"is 2\.0\d h in the future \(processor\.max_clock_ahead_s is 5 min\): "
                     r"a simulated history ends by now; leave --end out to end it now", err), err
    assert list(tmp_path.iterdir()) == []


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
    assert n == 3 * 240 * (2 * 4 * 36 + 2 * 5)  # 36 metrics a GPU, 5 a host
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


# -- a --fault the fleet cannot have: one usage line, before anything is written ------------

@pytest.mark.parametrize("command", ["simulate", "up"])
@pytest.mark.parametrize(("spec", "said"), [
    ("cooling:node-009/1", "no node node-009 in this fleet: its 2 nodes are node-000 .. "
                           "node-001 (--nodes 2)"),
    ("cooling:node-001/7", "no GPU 7 on node-001: its 2 GPUs are 0 .. 1 (--gpus 2)"),
    ("rack_cooling:rack-07", "no rack rack-07 in this fleet: its only rack is rack-00"),
    ("node_silent:node-002", "no node node-002"),
])
def test_a_fault_on_a_missing_node_gpu_or_rack_is_a_usage_error_before_anything_is_written(
        command: str, spec: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    extra = ["--duration", "30m"] if command == "simulate" else [
        "--simulate", "--port", str(free_port())]
    code = main([command, "--store", str(tmp_path / "f1.db"), "--nodes", "2", "--gpus", "2",
                 *extra, "--fault", spec])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"--fault {spec}: {said}" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []  # no store, no .lock


def test_no_faults_with_a_fault_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for command in (["simulate", "--duration", "30m"], ["up", "--simulate"]):
        code = main([*command, "--no-faults", "--fault", "cooling:node-001/1"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "--no-faults with --fault cooling:node-001/1" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_fault_that_starts_after_the_history_ends_is_warned_of(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--nodes", "1", "--gpus", "1", "--duration", "30m",
                 "--fault", "cooling:node-000/0@2h", "--fault", "cooling:node-000/0@10m"]) == 0
    err = capsys.readouterr().err
    late = [line for line in err.splitlines() if "never start" in line]
    assert late == ["fleetwatch simulate: warning: --fault cooling:node-000/0 starts 2 h into a "
                    "history of 30 min: it will never start (start it earlier with @START, or "
                    "make --duration longer)"], err
    # and the words of the rest: no "0.0208333 days", no "1 nodes"
    assert "simulating 30 min of 1 node x 1 A100 GPU every 15 s into" in err, err


# -- every flag's error names the flag as typed, and its range in words --------------------

def test_an_agent_interval_out_of_range_names_the_flag(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["agent", "--fake-gpus", "1", "--once", "--interval", "0s"]) == 2
    err = capsys.readouterr().err
    assert "command line --interval: agent.interval_s = 0 s; must be at least 0.05 s and at " \
           "most 1 h" in err, err
    assert "--interval-s" not in err


def test_a_store_flag_error_names_store_not_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alerts", "--store", "/tmp/CHANGE-ME.db"]) == 2
    err = capsys.readouterr().err
    assert "command line --store: store.path" in err and "--path" not in err, err


@pytest.mark.parametrize(("args", "said"), [
    (["simulate", "--duration", "401d"],
     "command line --duration: simulate.duration_s = 401 d; must be above 0 s and at most 366 d"),
    (["simulate", "--end", "1.7e12"],
     "must be a time between 2000-01-01 and 2100-01-01 (UTC), in seconds since 1970: 1.7e+12 "
     "looks like milliseconds; 1700000000 is 2023-11-14"),
    (["simulate", "--end", "5e9"], "simulate.end_ts = 5e+09 (2128-06-11); must be a time "
                                   "between 2000-01-01 and 2100-01-01"),
    (["up", "--simulate", "--backfill", "8d"],
     "command line --backfill: up.backfill_s = 8 d; must be at least 0 s and at most 7 d"),
    (["up", "--simulate", "--interval", "2h"], "up.interval_s = 2 h; must be at least 1 s and "
                                               "at most 1 h"),
])
def test_durations_and_times_out_of_range_are_said_in_words(
        args: list[str], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert said in err and "e+07" not in err and "4.10244e+09" not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "named"), [
    (["up", "--simulate", "--nodes", "100000"], "command line --nodes: a simulated fleet of "
                                                "100,000 nodes x 8 GPUs"),
    (["simulate", "--nodes", "200", "--gpus", "64"], "command line --nodes and --gpus"),
    (["simulate", "--nodes", "1025", "--gpus", "1"], "1,025 nodes x 1 GPU"),
])
def test_a_fleet_larger_than_one_machine_simulates_is_refused(
        args: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert named in err and "at most 1,024 nodes and 8,192 GPUs in all" in err, err
    assert list(tmp_path.iterdir()) == []


def test_one_fake_gpu_is_one_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--fake-gpus", "1", "--once"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(": 1 GPU"), first


def test_json_without_once_is_refused_not_a_long_running_agent(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--fake-gpus", "1", "--json"]) == 2
    assert "--json prints the one frame of --once: add --once" in capsys.readouterr().err


# -- a port in use: the address, the setting that chose it, and who holds it ---------------

def test_a_busy_dashboard_port_names_the_address_the_flag_and_the_holder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["dashboard", "--port", str(port), "--store", str(tmp_path / "x.db")])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"127.0.0.1:{port} (--port) is already in use by pid {os.getpid()} (" in err, err
    assert "choose another port with --port" in err
    assert not (tmp_path / "x.db").exists()  # the port first, the store after


def test_a_busy_metrics_port_names_its_setting_for_the_agent_and_the_processor(
        tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
        agent = fleetwatch("agent", "--fake-gpus", "1", env={
            **clean, "FLEETWATCH_AGENT_METRICS_PORT": str(port)})
        # The processor says it at once, before it waits for a broker that is not there.
        process = fleetwatch("process", env={
            **clean, "FLEETWATCH_BUS_KIND": "kafka",
            "FLEETWATCH_BUS_BOOTSTRAP": f"127.0.0.1:{free_port()}",
            "FLEETWATCH_STORE_PATH": str(tmp_path / "p.db"),
            "FLEETWATCH_PROCESSOR_METRICS_PORT": str(port)})
    for result, setting in ((agent, "agent.metrics_port"), (process, "processor.metrics_port")):
        assert result.returncode == 1, result.stderr
        assert f"127.0.0.1:{port} ({setting}) is already in use by pid {os.getpid()}" \
            in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert "cannot reach Kafka" not in process.stderr


def test_python_dash_m_fleetwatch_runs_the_cli() -> None:
    # The fallback where the console script is not on PATH (sudo, cron, a container).
    from fleetwatch import __version__

    result = subprocess.run([sys.executable, "-m", "fleetwatch", "--version"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # The version, and the commit where installed from a git checkout.
    assert result.stdout.strip().split(" (commit ")[0] == f"fleetwatch {__version__}"
