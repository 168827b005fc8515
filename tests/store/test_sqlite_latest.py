"""The SQLite store's ``latest`` over a long window finds each device's newest value from
its rollups' (did, ts) key and that minute's raw rows, not by walking every raw row: the
same answer as the walk, whether the newest value is in the open minutes, in a minute
written late (dirty), in an old rolled minute, or only in some of a device's layouts."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

from fleetwatch.frame import AGENT_STOPPED, HostReading
from fleetwatch.pipeline.store.base import Point
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.sqlite_reads import _value
from tests.store.helpers import frames, minute_ago


def _walked(store: SqliteStore, path: Path, metric: str, since_ms: int) -> list[Point]:
    """Every raw row walked, newest first: the answer ``latest`` must give."""
    newest: dict[int, Point] = {}
    with sqlite3.connect(path) as conn:
        for ts, did, lid, vals in conn.execute("SELECT ts, did, layout, vals FROM samples "
                                               "WHERE ts >= ? ORDER BY ts DESC", (since_ms,)):
            i = store._index[lid].get(metric)
            if did not in newest and i is not None:
                newest[did] = (store._key(metric, did), ts, _value(vals, i))
    return sorted(newest.values(), key=lambda p: (p[0].node, p[0].device))


def test_latest_over_a_long_window_is_the_walks_answer(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    t0 = minute_ago(90)
    early = frames("c", t0, 20 * 60, nodes=4)  # 20 minutes of four nodes
    # node-3's agent stops cleanly at 10 minutes: its last frame says so (another layout)
    stop = next(f for f in early if f.node == "node-3" and f.ts >= t0 / 1000 + 600)
    early = [f for f in early if f.node != "node-3" or f.ts <= stop.ts]
    early[early.index(stop)] = dataclasses.replace(stop, host=HostReading(
        {**stop.host.metrics, AGENT_STOPPED: 1.0}))
    store.write(early)
    store.maintain(t0 + 80 * 60_000)  # the 20 minutes rolled up
    late = [f for f in frames("c", t0 + 60 * 60_000, 30, nodes=2)]  # node-0/1 an hour on
    store.write(late)
    # node-2 written late into an old minute: dirty, not rolled up yet
    store.write([f for f in frames("c", t0 + 40 * 60_000 + 5_000, 3, nodes=3)
                 if f.node == "node-2"])
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM dirty_minutes").fetchone()[0] > 0
        assert conn.execute("SELECT COUNT(*) FROM rollup_1m").fetchone()[0] > 0
    top = t0 + 60 * 60_000 + 29_000
    for metric in ("gpu_temp_c", "host_cpu_util_pct", AGENT_STOPPED):
        for since in (0, t0, t0 + 10 * 60_000 + 30_500, t0 + 41 * 60_000, top - 60_000,
                      top + 1):
            got = store.latest(metric, since)
            assert got == _walked(store, path, metric, since), (metric, since)
    # what the rack judges depend on: each node's newest time, and node-3's stop
    nodes = {p[0].node: p[1] for p in store.latest("host_cpu_util_pct", t0)}
    assert nodes == {"node-0": top, "node-1": top, "node-2": t0 + 40 * 60_000 + 7_000,
                     "node-3": int(stop.ts * 1000)}
    assert [(p[0].node, p[2]) for p in store.latest(AGENT_STOPPED, t0)] == [("node-3", 1.0)]
    store.close()
