"""``fleetwatch up`` and ``simulate`` as a user runs them: real subprocesses, real signals.

Two instances at once on one store and one port, SIGTERM, ``--keep`` twice, a
store that already holds data: nothing is ever deleted or written twice (the history
``simulate`` writes into a store: ``test_simulate_store``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import free_port

FLEET = ["--nodes", "2", "--gpus", "2"]
INTERVAL_S = 5.0


def start_up(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "up", "--simulate", *FLEET,
                             *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def run_cli(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleetwatch.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def wait_for_line(proc: subprocess.Popen[str], text: str, timeout_s: float = 60) -> list[str]:
    """Lines of the process's output up to the first one containing ``text``."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"{text!r} not seen; output: {''.join(lines)}")


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def host_timestamps(path: Path, node: str = "node-000") -> list[int]:
    store = SqliteStore(path, read_only=True)
    try:
        # Every raw sample (a long range() would read one-minute rollups instead).
        return [ts for key, ts, _ in store.export()
                if key.metric == "host_cpu_util_pct" and key.node == node]
    finally:
        store.close()


def wait_for_samples(path: Path, n: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and len(host_timestamps(path)) >= n:
            return
        time.sleep(0.3)
    raise AssertionError(f"fewer than {n} samples in {path} after {timeout_s} s")


def test_second_up_on_the_same_store_and_port_leaves_the_first_intact(tmp_path: Path) -> None:
    port = str(free_port())
    first = start_up(tmp_path, "--port", port, "--speed", "60")
    try:
        wait_for_line(first, "dashboard:")
        db = tmp_path / "fleetwatch-sim.db"
        wait_for_samples(db, 5)
        inode, before = db.stat().st_ino, len(host_timestamps(db))

        same_port = run_cli(tmp_path, "up", "--simulate", *FLEET, "--port", port)
        assert same_port.returncode == 1, same_port.stderr
        assert "Traceback" not in same_port.stderr
        # The README's promise: the message names the address, the flag and the first pid.
        assert f"127.0.0.1:{port} (--port) is already in use by pid {first.pid} (" \
            in same_port.stderr, same_port.stderr

        other_port = run_cli(tmp_path, "up", "--simulate", *FLEET, "--port", str(free_port()))
        assert other_port.returncode == 1, other_port.stderr
        assert f"in use by another fleetwatch (pid {first.pid})" in other_port.stderr

        # The first instance's store is the same file, still growing, nothing lost.
        assert db.stat().st_ino == inode
        wait_for_samples(db, before + 2)
        assert first.poll() is None
    finally:
        code, out = stop(first)
    assert code == 0, out


def test_the_banner_names_node_and_rack_faults_and_says_durations_in_words(
        tmp_path: Path) -> None:
    proc = start_up(tmp_path, "--port", str(free_port()), "--fault", "node_silent:node-001@1m+5m",
                    "--fault", "rack_cooling:rack-00@2m+2h", "--fault", "cooling:node-000/1@2m+90m")
    try:
        head = "".join(wait_for_line(proc, "dashboard:"))
    finally:
        code, out = stop(proc)
    assert code == 0, out
    faults = [line.strip() for line in head.splitlines() if "injected fault" in line]
    assert [re.sub(r"\d\d:\d\d:\d\d", "T", f) for f in faults] == [
        "injected fault: node_silent on node-001, from T for 5 min",
        "injected fault: rack_cooling on rack-00, from T for 2 h",
        "injected fault: cooling on node-000 GPU 1, from T for 1.5 h"], head
    assert "simulated fleet: 2 nodes x 2 NVIDIA" in head, head


def test_one_node_is_said_as_one(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "up", "--simulate",
                             "--nodes", "1", "--gpus", "1", "--port", str(free_port())],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        head = "".join(wait_for_line(proc, "dashboard:"))
    finally:
        code, out = stop(proc)
    assert code == 0, out
    assert "simulated fleet: 1 node x 1 NVIDIA" in head, head
    assert "injected fault: cooling on node-000 GPU 0, from" in head and "for 6 h" in head


@pytest.mark.parametrize("delay_s", [0.0, 0.3, 0.8])
def test_sigterm_while_up_is_starting_stops_it_cleanly(tmp_path: Path, delay_s: float) -> None:
    # A supervisor's stop while the dashboard is still loading: an interrupt raised in the
    # middle of an import left threads running (a hang) or ended the process by SIGINT.
    proc = start_up(tmp_path, "--port", str(free_port()), "--speed", "200")
    head = wait_for_line(proc, "dashboard:")
    time.sleep(delay_s)
    code, out = stop(proc)
    out = "".join(head) + out
    assert code == 0, out
    assert re.search(r"stopped \(SIGTERM\): [\d,]+ frames stored; every frame sent was stored; "
                     r"store closed", out), out
    assert "Traceback" not in out
    assert not (tmp_path / "fleetwatch-sim.db.lock").read_text()  # released


def test_a_second_signal_after_the_stop_does_not_change_the_exit(tmp_path: Path) -> None:
    # An impatient Ctrl-C (or a supervisor's second SIGTERM) just as up finishes.
    proc = start_up(tmp_path, "--port", str(free_port()), "--speed", "200")
    wait_for_line(proc, "dashboard:")
    wait_for_samples(tmp_path / "fleetwatch-sim.db", 10)
    proc.send_signal(signal.SIGTERM)
    lines = wait_for_line(proc, "store closed")
    proc.send_signal(signal.SIGINT)
    code, out = stop(proc, signal.SIGINT)
    out = "".join(lines) + out
    assert code == 0, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out


@pytest.mark.parametrize(("sig", "said"), [(signal.SIGTERM, "SIGTERM"),
                                           (signal.SIGINT, "Ctrl-C")])
def test_sigterm_stores_every_frame_sent_and_says_so(tmp_path: Path, sig: int, said: str) -> None:
    proc = start_up(tmp_path, "--port", str(free_port()), "--speed", "200")
    wait_for_line(proc, "dashboard:")
    db = tmp_path / "fleetwatch-sim.db"
    wait_for_samples(db, 20)
    code, out = stop(proc, sig)
    assert code == 0, out
    match = re.search(rf"stopped \({said}\): ([\d,]+) frames stored; every frame sent was "
                      r"stored; store closed", out)
    assert match, out
    frames = int(match.group(1).replace(",", ""))
    # What the store holds, counted by the store: one host row per frame (2 nodes).
    stored = sum(len(host_timestamps(db, node)) for node in ("node-000", "node-001"))
    assert stored == frames > 0
    assert not (tmp_path / "fleetwatch-sim.db.lock").read_text()  # released, no stale pid


def test_keep_twice_continues_one_timeline(tmp_path: Path) -> None:
    db = tmp_path / "fleetwatch-sim.db"
    for run in range(2):
        proc = start_up(tmp_path, "--keep", "--port", str(free_port()), "--speed", "300",
                        "--backfill", "10m")
        wait_for_line(proc, "dashboard:")
        wait_for_samples(db, 20 * (run + 1))
        code, out = stop(proc)
        assert code == 0, out
    ts = host_timestamps(db)
    steps = [b - a for a, b in zip(ts, ts[1:])]
    # One timeline: every sample a whole interval after the one before (no second
    # backfill of the same minutes between them, and no sample missing at the seam).
    assert min(steps) >= INTERVAL_S * 1000 - 1, sorted(steps)[:5]
    assert max(steps) <= INTERVAL_S * 1000 + 1, sorted(steps)[-5:]
    store = SqliteStore(db, read_only=True)
    try:
        for a in store.alerts(("pending", "firing", "resolved")):
            assert a.resolved_ts is None or a.resolved_ts >= a.started_ts, a
    finally:
        store.close()


def test_up_never_wipes_a_store_that_holds_data(tmp_path: Path) -> None:
    db = tmp_path / "real.db"
    made = run_cli(tmp_path, "simulate", "--store", str(db), "--duration", "10m", *FLEET)
    assert made.returncode == 0, made.stderr
    before = host_timestamps(db)
    result = run_cli(tmp_path, "up", "--simulate", "--store", str(db), "--port",
                     str(free_port()))
    assert result.returncode == 2
    assert "already holds data" in result.stderr and "--keep" in result.stderr
    assert host_timestamps(db) == before and before


def test_store_in_a_missing_folder_is_refused_not_created(tmp_path: Path) -> None:
    for command in (["up", "--simulate", "--port", str(free_port())],
                    ["simulate", "--duration", "10m"]):
        result = run_cli(tmp_path, *command, "--store", str(tmp_path / "nope" / "x.db"))
        assert result.returncode == 2, result.stderr
        assert "does not exist" in result.stderr and "Traceback" not in result.stderr
        assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("command", ["up", "simulate"])
def test_store_taken_by_another_process(tmp_path: Path, command: str) -> None:
    from fleetwatch.storelock import StoreLock

    with StoreLock(tmp_path / "fleetwatch-sim.db"):
        args = ["--port", str(free_port())] if command == "up" else ["--duration", "10m"]
        result = run_cli(tmp_path, command, *(["--simulate"] if command == "up" else []), *args)
    assert result.returncode == 1
    assert f"in use by another fleetwatch (pid {os.getpid()})" in result.stderr
    assert not (tmp_path / "fleetwatch-sim.db").exists()


class FakeWall:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def now(self) -> float:
        return self.t

    def wall_seconds(self, seconds: float) -> float:
        return seconds


def test_paced_clock_follows_its_pace_and_never_jumps() -> None:
    from fleetwatch.simclock import PacedClock

    wall, pace = FakeWall(), [30.0]
    start = wall.t - 3600
    clock = PacedClock(start, pace=lambda: pace[0], wall=wall)
    wall.t += 10
    assert clock.now() == pytest.approx(start + 300)
    pace[0] = 6.0
    assert clock.now() == pytest.approx(start + 300)  # the pace changes here, without a jump
    wall.t += 10
    assert clock.now() == pytest.approx(start + 360)
    assert clock.wall_seconds(60) == pytest.approx(10)
    pace[0] = 0.0  # held: the processor is behind
    clock.now()
    wall.t += 10
    assert clock.now() == pytest.approx(start + 360)
    pace[0] = 30.0
    clock.now()
    wall.t += 1000
    assert clock.now() == wall.t  # caught up: never ahead of the wall


def test_a_pending_alert_lasts_two_refreshes_of_wall_time(tmp_path: Path) -> None:
    """At 300x a 30 s for-duration would pass in 0.1 s, between two refreshes of the page.
    (At 3000x the agent runs ticks ahead of the processor by more than a for-duration,
    so an alert can go pending and fire in one batch before the clock can slow.)"""
    from fleetwatch.collectors.sim import parse_fault
    from fleetwatch.config import load
    from fleetwatch.up import UpOptions, build

    # The thermal limits alone: gpu_temp_high waits out a 30 s for-duration (others fire
    # at once or wait less than the agent's lead over the processor).
    config = load(env={"FLEETWATCH_SIM_JOB_MEAN_S": "1e9", "FLEETWATCH_DETECTORS_PEER_FOR_S": "30",
                       "FLEETWATCH_DETECTORS_ENABLED": "thermal_limits",
                       "FLEETWATCH_DETECTORS_HIGH_FOR_S": "30",
                       "FLEETWATCH_DASHBOARD_REFRESH_S": "1", "FLEETWATCH_SIM_NODES": "2",
                       "FLEETWATCH_SIM_GPUS": "2"})
    options = UpOptions(simulate=True, interval_s=5.0, backfill_s=3 * 3600.0, speed=300.0,
                        faults=[parse_fault("cooling:node-001/1@10m+2h")],
                        store=str(tmp_path / "p.db"), steady_load=True)
    system, _ = build(config, options)
    system.start()
    seen: dict[str, list[float]] = {}  # alert id -> wall times it was seen pending
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            alerts = system.processor.alerts.open
            for a in alerts:
                if a.state == "pending":
                    seen.setdefault(a.id, []).append(time.monotonic())
            # Done once an alert that was seen pending fires (critical rules fire at once).
            if any(a.state == "firing" and a.id in seen for a in alerts):
                break
            time.sleep(0.02)
    finally:
        system.stop()
    assert seen, "no alert was ever pending"
    # Two refreshes (2 s) of wall time, less the polling and batching slack.
    spans = {k: round(v[-1] - v[0], 2) for k, v in seen.items()}
    assert max(spans.values()) >= 1.5, spans
