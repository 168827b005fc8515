"""The SQLite store reads one node's raw samples without handing the whole fleet's rows
to Python, and answers exactly what filtering the fleet's rows would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.store.helpers import frames

T0 = 1_763_800_000_000


class Counting:
    """A connection whose cursors count the rows they hand to Python."""

    def __init__(self, conn: Any, seen: list[int]) -> None:
        self._conn, self._seen = conn, seen

    def execute(self, sql: str, args: Any = ()) -> Any:
        for row in self._conn.execute(sql, args):
            self._seen[0] += 1
            yield row


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    db = tmp_path / "fleet.db"
    writer = SqliteStore(db)
    writer.write(frames("c", T0, ticks=60, nodes=40, gpus=4))
    writer.close()
    return db


def test_one_node_reads_only_that_nodes_rows(fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = SqliteStore(fleet, read_only=True)
    whole = [p for p in reader.range("gpu_temp_c", T0, T0 + 60_000) if p[0].node == "node-7"]
    seen = [0]
    conn = reader._conn()
    monkeypatch.setattr(reader, "_conn", lambda: Counting(conn, seen))
    one = reader.range("gpu_temp_c", T0, T0 + 60_000, node="node-7")
    assert one == whole and len(one) == 60 * 4
    # 40 nodes x 6 devices x 60 s are in the window; one node's 6 devices x 60 s come back
    # (the old read handed all 14,400 rows to Python and dropped the others there).
    tables = 40 * 6 + 10  # the devices and layouts tables, read to learn new ids
    assert seen[0] <= 60 * 6 + tables
    seen[0] = 0
    gpu = reader.range("gpu_power_w", T0, T0 + 60_000, node="node-7", device="gpu2")
    assert [v for _, _, v in gpu] == [100.0 + t + 0.5 for t in range(60)]
    assert seen[0] <= 60 + tables


def test_a_read_of_more_devices_than_sql_binds_is_still_exact(
        fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetwatch.pipeline.store import sqlite_reads
    reader = SqliteStore(fleet, read_only=True)
    bound = reader.range("gpu_temp_c", T0, T0 + 10_000)
    monkeypatch.setattr(sqlite_reads, "_SQL_IN_MAX", 5)  # every read now filters in Python
    assert reader.range("gpu_temp_c", T0, T0 + 10_000) == bound
    assert {p[0].node for p in reader.range("gpu_temp_c", T0, T0 + 10_000, node="node-3")} == {
        "node-3"}
