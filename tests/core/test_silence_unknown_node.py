"""``silence add node=X`` for a node the store does not know (a typo at 3 a.m., or a node
not reporting yet) is silenced with a warning naming the nodes it may have meant, as
``alerts --node`` suggests them; and every silence says how many open alerts it mutes now."""

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


def test_a_typo_is_silenced_with_a_warning_that_says_did_you_mean(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path / "f.db")
    assert main(["silence", "add", "node=gpu-a9", "--for", "2h", "--store", db]) == 0
    out, err = capsys.readouterr()
    (s,) = SqliteStore(db, read_only=True).silences()
    assert out.strip() == s.id  # ID=$(fleetwatch silence add ...) still gets it
    assert "WARNING: no node 'gpu-a9'" in err and "did you mean " in err and "gpu-a01" in err
    assert "matches no open alert now" in err and f"fleetwatch silence expire {s.id}" in err


def test_a_node_not_reporting_yet_is_silenced_with_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's example: node-007 silenced before it joins a fleet of node-000..003."""
    db = _store(tmp_path / "f.db")
    assert main(["silence", "add", "node=node-007", "--for", "2h", "--store", db]) == 0
    out, err = capsys.readouterr()
    (s,) = SqliteStore(db, read_only=True).silences()
    assert out.strip() == s.id and s.matchers == (("node", "=", "node-007"),)
    assert "no node 'node-007'" in err and "matches no open alert now" in err
    with pytest.raises(SystemExit) as exit_:  # --force is gone: it meant nothing more
        main(["silence", "add", "node=gpu-c01", "--force", "--store", db])
    assert exit_.value.code == 2


def test_a_known_node_says_how_many_open_alerts_it_mutes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path / "f.db")
    assert main(["silence", "add", "node=gpu-a01", "--for", "30m", "--store", db]) == 0
    err = capsys.readouterr().err
    assert "mutes 1 open alert now" in err and "no node" not in err
    assert main(["silence", "add", "node=gpu-b01", "--for", "30m", "--store", db]) == 0
    assert "matches no open alert now" in capsys.readouterr().err
