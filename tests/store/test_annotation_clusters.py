"""Annotations name their cluster: a fault of west/node-001 is not drawn on east/node-001.
A store written before annotations had a cluster stays readable: its rows read as cluster ""
(any), as they were shown before, and a writer moves them over."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fleetwatch.pipeline.store.base import Annotation
from fleetwatch.pipeline.store.lprecords import annotation_line
from fleetwatch.pipeline.store.sqlite import SqliteStore

T = 1_800_000_000.0


def test_two_clusters_same_fault_same_start_are_two_rows(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    east = Annotation("fault", T, T + 600, "node-001", "gpu3", "cooling", cluster="east")
    west = Annotation("fault", T, T + 600, "node-001", "gpu3", "cooling", cluster="west")
    store.write_annotations([east, west])
    assert sorted(store.annotations(T - 1, T + 1), key=lambda a: a.cluster) == [east, west]
    store.close()


def _old_store(path: Path) -> None:
    """A store with the annotations table as stores before this change have it, one row."""
    SqliteStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE cluster_annotations")
        db.execute("CREATE TABLE annotations (kind TEXT, start_ts REAL, end_ts REAL, "
                   "node TEXT, device TEXT, text TEXT, UNIQUE (kind, start_ts, node, device))")
        db.execute("INSERT INTO annotations VALUES ('fault', ?, ?, 'node-001', 'gpu3', "
                   "'old fault')", (T, T + 600))
    db.close()


def test_an_old_store_reads_its_annotations_as_any_cluster(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_store(path)
    old = Annotation("fault", T, T + 600, "node-001", "gpu3", "old fault", cluster="")
    reader = SqliteStore(path, read_only=True)  # a dashboard on a file no writer upgraded
    assert reader.annotations(T - 1, T + 1) == [old]
    reader.close()
    writer = SqliteStore(path)
    new = Annotation("fault", T, T + 600, "node-001", "gpu3", "new", cluster="west")
    writer.write_annotations([new])
    assert sorted(writer.annotations(T - 1, T + 1), key=lambda a: a.cluster) == [old, new]
    writer.close()


def test_line_protocol_carries_the_cluster_as_a_tag() -> None:
    a = Annotation("fault", T, T + 600, "node-001", "gpu3", "cooling", cluster="west")
    assert ",cluster=west," in annotation_line(a)
    assert "cluster=" not in annotation_line(Annotation("fault", T, None, "n", "host", "x"))
