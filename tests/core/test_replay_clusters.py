"""Replay of files that hold several clusters: a node is named within its cluster, so two
machines called n1 in two clusters are two nodes, never one node's two agents."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.recorded import frames, read_files

T0 = 1_800_000_000


def agent_frames(path: Path, clusters: tuple[str, str], ticks: int = 60) -> Path:
    """Two machines reporting as n1, each with its own boards, interleaved every 5 s."""
    lines = []
    for k in range(ticks):
        for m, cluster in enumerate(clusters):
            gpus = [{"index": i, "uuid": f"GPU-machine{m}-{i}",
                     "metrics": {"gpu_temp_c": 50.0 + m, "gpu_power_w": 300.0}}
                    for i in range(2)]
            lines.append(json.dumps({"ts": T0 + 5 * k + m * 0.5, "node": "n1",
                                     "cluster": cluster, "rack": "r1", "gpus": gpus,
                                     "host": {"metrics": {}}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_frames_cluster_is_kept_and_same_named_nodes_stay_two(tmp_path: Path) -> None:
    batches = frames(read_files([agent_frames(tmp_path / "f.jsonl", ("sim", "other"))]))
    seen = {(f.cluster, f.node): {g.uuid for g in f.gpus} for b in batches for f in b}
    assert seen == {("sim", "n1"): {"GPU-machine0-0", "GPU-machine0-1"},
                    ("other", "n1"): {"GPU-machine1-0", "GPU-machine1-1"}}
    temps = {(f.cluster, f.gpus[0].metrics["gpu_temp_c"]) for b in batches for f in b}
    assert temps == {("sim", 50.0), ("other", 51.0)}  # no series mixed


def test_long_csv_with_a_cluster_column_keeps_same_named_nodes_apart(tmp_path: Path) -> None:
    rows = ["timestamp,node,gpu,metric,value,cluster"]
    for k in range(4):
        rows += [f"{T0 + 15 * k},n1,0,gpu_temp_c,40,east",
                 f"{T0 + 15 * k},n1,0,gpu_temp_c,70,west"]
    path = tmp_path / "long.csv"
    path.write_text("\n".join(rows) + "\n")
    reading = read_files([path])
    assert reading.conflicts == 0  # the two values are two nodes' samples, not one's twice
    got = {(f.cluster, f.node, f.gpus[0].metrics["gpu_temp_c"])
           for b in frames(reading) for f in b}
    assert got == {("east", "n1", 40.0), ("west", "n1", 70.0)}


@pytest.mark.parametrize("clusters, conflict", [(("sim", "other"), False),
                                                (("sim", "sim"), True)])
def test_replay_into_a_store_files_each_cluster_and_only_a_true_conflict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], clusters: tuple[str, str],
        conflict: bool) -> None:
    path = agent_frames(tmp_path / "f.jsonl", clusters)
    store = tmp_path / "s.db"
    main(["replay", str(path), "--store", str(store)])
    capsys.readouterr()
    with sqlite3.connect(store) as db:
        nodes = {r for r in db.execute("SELECT DISTINCT cluster, node FROM devices")}
        rules = {r[0] for r in db.execute("SELECT rule FROM alert_states")}
    assert nodes == {(c, "n1") for c in clusters}
    assert ("node_name_conflict" in rules) is conflict
