"""The SQLite store's cached device ids follow the live fleet: the ids of nodes forgotten
for good (``retire``, called by the processor after ``FORGET_S``) leave its caches, where
every node name ever seen stayed before (an autoscaled pool's churn grew them without
end). Their rows stay; a node that comes back finds its ids again, and history of it is
still read."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node

T0 = 1_790_000_000.0


def cached(store: SqliteStore, name: str) -> list[str]:
    """The caches of ``store`` that still name node ``name``."""
    return [cache for cache, keys in (
        ("_dids", [k[2] for k in store._dids]),
        ("_node_dids", [k[2] for k in store._node_dids]),
        ("_idents", [v[2] for v in store._idents.values()])) if name in keys]


def test_a_retired_node_leaves_the_id_caches_and_comes_back_under_its_ids(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fw.db")
    store.write([node(T0, [busy(60), busy(61)], name=n) for n in ("stays", "gone")])
    ids = {k: v for k, v in store._dids.items() if k[2] == "gone"}
    assert len(ids) == 2 and cached(store, "gone") == ["_dids", "_node_dids", "_idents"]
    store.retire({"gone"})
    assert cached(store, "gone") == []
    assert cached(store, "stays") == ["_dids", "_node_dids", "_idents"]
    # A write of the live node, and a read of history, cache none of it again.
    store.write([node(T0 + 60, [busy(60), busy(61)], name="stays")])
    got = store.range("gpu_temp_c", int(T0 * 1000), int((T0 + 120) * 1000), node="gone")
    assert sorted((k.device, float(v)) for k, _, v in got) == [("gpu0", 60.0), ("gpu1", 61.0)]
    assert "_dids" not in cached(store, "gone") and "_node_dids" not in cached(store, "gone")
    # Back: the same ids, from the table.
    store.write([node(T0 + 120, [busy(62), busy(63)], name="gone")])
    assert {k: v for k, v in store._dids.items() if k[2] == "gone"} == ids
    got = store.range("gpu_temp_c", int(T0 * 1000), int((T0 + 180) * 1000), node="gone")
    assert sorted(float(v) for k, _, v in got if k.device == "gpu0") == [60.0, 62.0]
    store.close()
