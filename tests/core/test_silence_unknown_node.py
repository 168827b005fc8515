"""``silence add node=X`` for a node the store does not know (a typo at 3 a.m.) is refused
with the names it may have meant, as ``alerts --node`` suggests them, unless forced for a
node that is not reporting yet; and every silence says how many open alerts it mutes now."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.silencing import unknown_node
from tests.core.test_alerts import frame

NODES = ["gpu-a01", "gpu-a02", "gpu-b01", "gpu-b02"]


def test_unknown_node_names_the_near_ones_and_says_nothing_of_a_known_one() -> None:
    said = unknown_node("gpu-a9", NODES)
    assert "no node 'gpu-a9'" in said and "did you mean " in said and "gpu-a01" in said
    assert unknown_node("gpu-a01", NODES) == ""
    assert "nodes seen: gpu-a01" in unknown_node("zzz", NODES)


def _store(path: Path) -> str:
    """gpu-a01 GPU 0 at 95 °C (firing) and three cool nodes, reporting now."""
    store = SqliteStore(path)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)])
    now = time.time()
    processor.process([frame(now, [95 if n == "gpu-a01" else 50], node=n) for n in NODES])
    store.close()
    return str(path)


def test_a_typo_is_refused_with_did_you_mean_and_nothing_is_stored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path / "f.db")
    assert main(["silence", "add", "node=gpu-a9", "--for", "2h", "--store", db]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "did you mean " in err and "gpu-a01" in err and "--force" in err
    assert SqliteStore(db, read_only=True).silences() == []


def test_force_silences_a_node_not_reporting_yet_and_says_it_mutes_nothing_now(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path / "f.db")
    assert main(["silence", "add", "node=gpu-c01", "--for", "2h", "--force",
                 "--store", db]) == 0
    out, err = capsys.readouterr()
    (s,) = SqliteStore(db, read_only=True).silences()
    assert out.strip() == s.id
    assert "no node 'gpu-c01'" in err and "matches no open alert now" in err


def test_a_known_node_says_how_many_open_alerts_it_mutes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path / "f.db")
    assert main(["silence", "add", "node=gpu-a01", "--for", "30m", "--store", db]) == 0
    err = capsys.readouterr().err
    assert "mutes 1 open alert now" in err and "no node" not in err
    assert main(["silence", "add", "node=gpu-b01", "--for", "30m", "--store", db]) == 0
    assert "matches no open alert now" in capsys.readouterr().err
