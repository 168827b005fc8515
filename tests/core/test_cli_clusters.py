"""`alerts --cluster`, and a silence of a node name that several clusters share."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.silencing import cluster_scope_warning
from tests.core.test_alerts import frame


def two_clusters(tmp_path: Path) -> str:
    """node001 hot in c-east and in c-west, node002 only in c-east: alerts and samples."""
    db = str(tmp_path / "fleet.db")
    store = SqliteStore(db)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)])
    now = time.time()
    processor.process([dataclasses.replace(frame(now, [95], node=n), cluster=c)
                       for c, n in (("c-east", "node001"), ("c-west", "node001"),
                                    ("c-east", "node002"))])
    processor.flush()
    store.close()
    return db


def test_alerts_of_one_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = two_clusters(tmp_path)
    assert main(["alerts", "--store", db, "--node", "node001"]) == 0
    assert capsys.readouterr().out.startswith("2 firing")  # both clusters' node001
    assert main(["alerts", "--store", db, "--node", "node001", "--cluster", "c-west"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 firing") and "c-west/r/node001/gpu0" in out
    assert "c-east" not in out
    assert main(["alerts", "--store", db, "--cluster", "c-east"]) == 0
    out = capsys.readouterr().out
    assert "c-east/r/node001" in out and "c-east/r/node002" in out and "c-west" not in out
    assert main(["alerts", "--store", db, "--cluster", "c-north"]) == 0
    out = capsys.readouterr().out
    assert "no open alerts of cluster c-north" in out and "clusters seen: c-east, c-west" in out


def test_a_silence_of_a_node_of_several_clusters_warns_and_says_how_to_scope_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = two_clusters(tmp_path)
    assert main(["silence", "--store", db, "add", "node=node001", "rule=gpu_temp_high",
                 "--for", "30m"]) == 0
    err = capsys.readouterr().err
    assert ("warning: node001 is a node of 2 clusters (c-east, c-west): this silence mutes "
            "node001 in every one of them") in err
    assert "add cluster=NAME, e.g. fleetwatch silence add cluster=c-east node=node001" in err
    for scoped in (["cluster=c-east", "node=node001"], ["node=node002"]):
        assert main(["silence", "--store", db, "add", *scoped, "--for", "30m"]) == 0
        assert "warning" not in capsys.readouterr().err


def test_the_warning_is_for_a_node_equality_without_a_cluster_only() -> None:
    two = ["c-east", "c-west"]
    assert cluster_scope_warning([("node", "=", "n1")], two).startswith("warning: n1 is")
    assert cluster_scope_warning([("node", "=", "n1"), ("cluster", "=~", "c-.*")], two) == ""
    assert cluster_scope_warning([("node", "=", "n1")], ["c-east"]) == ""
    assert cluster_scope_warning([("node", "=~", "n.*")], two) == ""
