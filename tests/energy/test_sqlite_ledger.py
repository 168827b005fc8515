"""The SQLite ledger on a file that is not SQLite: one clear line, never a traceback."""

from __future__ import annotations

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore


@pytest.fixture
def garbage(tmp_path):
    p = tmp_path / "g.db"
    p.write_text("garbage\n")  # what `echo garbage > g.db` leaves
    return p


def test_the_ledger_of_a_file_that_is_not_sqlite_is_a_store_error(garbage):
    store = SqliteStore(garbage, read_only=True)
    try:
        with pytest.raises(StoreError, match=f"{garbage} is not a fleetwatch SQLite store"):
            store.energy(0, 1e12)
    finally:
        store.close()


def test_report_on_a_file_that_is_not_sqlite_names_it_and_fails(garbage, tmp_path, capsys):
    code = main(["report", "--month", "2022-05", "--store", str(garbage),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{garbage} is not a fleetwatch SQLite store" in err
    assert "Traceback" not in err
