"""`--store PATH` names a SQLite file whatever `store.kind` says: with the cluster's config in
$FLEETWATCH_CONFIG, `silence add --store test.db` had gone to the production store. And a
command Ctrl-C ends before its result is whole says so with 130, not 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch import cli
from fleetwatch.cli import main
from fleetwatch.pipeline.store.sqlite import SqliteStore


@pytest.fixture
def cluster_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_STORE_KIND", "victoriametrics")
    monkeypatch.setenv("FLEETWATCH_STORE_URL", "http://127.0.0.1:9")  # nothing listens


def test_store_flag_means_that_sqlite_file_with_a_server_configured(
        tmp_path: Path, cluster_config: None, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "test-only.db"
    SqliteStore(db).close()
    assert main(["silence", "add", "node=node-001", "--for", "2h", "--by", "me",
                 "--store", str(db)]) == 0
    store = SqliteStore(db, read_only=True)
    try:
        assert [s.matchers[0][2] for s in store.silences()] == ["node-001"]
    finally:
        store.close()
    capsys.readouterr()
    assert main(["alerts", "--store", str(db)]) == 0
    assert capsys.readouterr().out == f"no open alerts in {db}\n"


def test_a_command_interrupted_by_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*_: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(cli._COMMANDS, "config", interrupted)
    assert main(["config"]) == 130
    assert "interrupted (Ctrl-C) before it finished" in capsys.readouterr().err
