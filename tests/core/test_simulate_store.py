"""``fleetwatch simulate``'s history in a store, as a user runs it (real subprocesses, real
signals): hours the store holds are refused, two clusters' histories of the same hours
side by side, faults filed under their cluster, a killed run's hours, never the real
store, and a stop on SIGTERM between batches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_up import (
    FLEET,
    host_timestamps,
    run_cli,
    stop,
    wait_for_line,
    wait_for_samples,
)


def test_simulate_refuses_to_write_a_second_history_over_hours_the_store_holds(
        tmp_path: Path) -> None:
    """Two fleets interleaved sample by sample read as one GPU flipping between them."""
    db = tmp_path / "w.db"
    end = "1790000000"
    made = run_cli(tmp_path, "simulate", "--store", str(db), "--duration", "10m", "--end", end,
                   *FLEET)
    assert made.returncode == 0, made.stderr
    before = host_timestamps(db)
    again = run_cli(tmp_path, "simulate", "--store", str(db), "--duration", "10m", "--end",
                    str(1790000000 + 300), *FLEET)
    assert again.returncode == 1
    assert ("already holds samples of cluster sim from 2026-09-21 14:08 UTC to 2026-09-21 "
            "14:13 UTC") in (
        again.stderr) and "--store NEW.db" in again.stderr and "Traceback" not in again.stderr
    assert host_timestamps(db) == before
    # After the data it holds: a longer history of the same fleet, one timeline.
    later = run_cli(tmp_path, "simulate", "--store", str(db), "--duration", "10m", "--end",
                    str(1790000000 + 600), *FLEET)
    assert later.returncode == 0, later.stderr
    assert len(host_timestamps(db)) == 2 * len(before)


def test_simulate_writes_two_clusters_histories_of_the_same_hours_into_one_store(
        tmp_path: Path) -> None:
    db = tmp_path / "two.db"
    span = ["--store", str(db), "--duration", "10m", "--end", "1790000000", *FLEET]
    west = run_cli(tmp_path, "simulate", "--cluster", "west-a100", *span)
    assert west.returncode == 0, west.stderr
    east = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "simulate", "--part", "h100",
                           *span], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FLEETWATCH_SIM_CLUSTER": "east-h100"})
    assert east.returncode == 0, east.stderr
    store = SqliteStore(db, read_only=True)
    try:
        temps = [key for key, _, _ in store.export() if key.metric == "gpu_temp_c"]
        ledger = {r.cluster for r in store.energy(1790000000 - 3600, 1790000000 + 3600)}
    finally:
        store.close()
    # Two fleets, each its own series: 2 nodes x 2 GPUs x 40 samples each.
    assert {k.cluster for k in temps} == {"west-a100", "east-h100"} == ledger
    assert len([k for k in temps if k.cluster == "west-a100"]) == len(temps) // 2 == 160
    # The agent's cluster setting is not the simulator's: said, not silently ignored.
    again = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "simulate", "--store",
                            str(tmp_path / "n.db"), "--duration", "1m", *FLEET], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "FLEETWATCH_NODE_CLUSTER": "c-eu"})
    assert again.returncode == 0 and "node.cluster (c-eu) is an agent's" in again.stderr


def test_simulate_files_its_faults_under_its_own_cluster(tmp_path: Path) -> None:
    """Two clusters with the same node names in one store: a fault injected in one is
    annotated for that cluster only, so the other's same-named node does not show it."""
    db = tmp_path / "two.db"
    span = ["--store", str(db), "--duration", "10m", "--end", "1790000000", *FLEET]
    for extra in (["--cluster", "east", "--no-faults"],
                  ["--cluster", "west", "--fault", "cooling:node-001/1@1m+5m"]):
        made = run_cli(tmp_path, "simulate", *extra, *span)
        assert made.returncode == 0, made.stderr
    store = SqliteStore(db, read_only=True)
    try:
        rows = [(a.cluster, a.node, a.device) for a in store.annotations(0, 2e9)]
    finally:
        store.close()
    assert rows == [("west", "node-001", "gpu1")]


def test_simulate_refuses_hours_a_killed_run_left_without_rollups(tmp_path: Path) -> None:
    """A run killed (kill -9, OOM) before its rollups were built leaves raw samples only;
    a span longer than the raw reads' 6 h used to read rollups only, find none, and write
    a second fleet between the first one's samples."""
    import sqlite3

    db = tmp_path / "k.db"
    end = 1790000000
    made = run_cli(tmp_path, "simulate", "--store", str(db), "--duration", "10m", "--end",
                   str(end), *FLEET)
    assert made.returncode == 0, made.stderr
    with sqlite3.connect(db) as conn:  # what a kill -9 leaves: no minute rolled up yet
        conn.execute("DELETE FROM rollup_1m")
    before = host_timestamps(db)
    again = run_cli(tmp_path, "simulate", "--store", str(db), "--duration", "12h", "--end",
                    str(end + 300), *FLEET)
    assert again.returncode == 1, again.stderr
    assert ("already holds samples of cluster sim from 2026-09-21 14:03 UTC to "
            "2026-09-21 14:13 UTC") in again.stderr
    assert host_timestamps(db) == before


def test_simulate_never_writes_the_real_store(tmp_path: Path) -> None:
    env = {**os.environ, "FLEETWATCH_STORE_PATH": str(tmp_path / "real.db")}
    result = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "simulate", "--duration",
                             "10m", *FLEET], cwd=tmp_path, capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "real.db").exists() and not (tmp_path / "fleetwatch.db").exists()
    assert len(host_timestamps(tmp_path / "fleetwatch-sim.db")) == 10 * 60 // 15


def test_simulate_stops_on_sigterm_between_batches(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "simulate", "--days", "30",
                             "--interval", "5s"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    wait_for_line(proc, "simulating")
    wait_for_samples(tmp_path / "fleetwatch-sim.db", 3600 // 5)
    code, out = stop(proc, signal.SIGTERM)
    assert code == 0, out
    assert "stopped (SIGTERM)" in out and "store closed" in out
    ts = host_timestamps(tmp_path / "fleetwatch-sim.db")
    assert ts and len(ts) % (60 // 5) == 0  # whole batches only (a minute each)
