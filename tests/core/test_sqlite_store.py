from __future__ import annotations

import dataclasses
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.store import Alert, Annotation
from fleetwatch.pipeline.store.sqlite import SqliteStore

START = 1_763_800_000.0  # a whole minute


def frames_for(steps: int, interval_s: float = 15.0, nodes: int = 2, gpus: int = 2) -> list:
    sim = FleetSim(SimParams(nodes=nodes, gpus=gpus, interval_s=interval_s), START)
    out = []
    for _ in range(steps):
        sim.step()
        out.extend(sim.frames())
    return out


def count(path: Path, sql: str) -> int:
    with sqlite3.connect(path) as c:
        return c.execute(sql).fetchone()[0]


def raw_minutes(path: Path) -> dict:
    with sqlite3.connect(path) as c:
        return {(sid, m): (n, s, lo, hi) for sid, m, n, s, lo, hi in c.execute(
            "SELECT sid, ts - ts % 60000, count(*), sum(value), min(value), max(value) "
            "FROM samples GROUP BY sid, ts - ts % 60000")}


def rollup_rows(path: Path) -> dict:
    with sqlite3.connect(path) as c:
        return {(sid, m): (n, s, lo, hi) for sid, m, n, s, lo, hi in c.execute(
            "SELECT sid, ts, n, sum, min, max FROM rollup_1m")}


def test_writes_are_idempotent(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    frames = frames_for(40)
    n = store.write(frames)
    assert n == count(tmp_path / "s.db", "SELECT count(*) FROM samples")
    store.write(frames[:17])  # a replay of part of it
    store.write(frames)
    assert count(tmp_path / "s.db", "SELECT count(*) FROM samples") == n


def test_rollups_equal_the_raw_aggregates(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    frames = frames_for(200, interval_s=7.0)  # 7 s does not divide a minute
    # batches that cut minutes at odd places, and one replayed
    for lo, hi in [(0, 13), (13, 14), (14, 151), (100, 151), (151, 400)]:
        store.write(frames[lo:hi])
    store.maintain(int(frames[-1].ts * 1000) + 10 * 60_000)  # every minute closed
    raw, rolled = raw_minutes(path), rollup_rows(path)
    assert raw.keys() == rolled.keys()
    for key, (n, total, lo, hi) in raw.items():
        rn, rs, rlo, rhi = rolled[key]
        assert (rn, rlo, rhi) == (n, lo, hi)
        assert rs == pytest.approx(total)


def test_long_ranges_read_rollups(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    frames = frames_for(24 * 60 * 4 // 4, interval_s=60.0, nodes=1, gpus=1)  # a day by minute
    store.write(frames)
    end = int(frames[-1].ts * 1000) + 1
    store.maintain(end + 10 * 60_000)
    short = store.range("gpu_temp_c", end - 3600_000, end)
    long = store.range("gpu_temp_c", end - 86400_000, end)
    assert len(short) == 60
    assert len(long) >= 24 * 60 - 2
    # 1-minute rollups of 1-minute samples are the samples themselves
    assert {p[1]: p[2] for p in long if p[1] >= end - 3600_000} == pytest.approx(
        {p[1] - p[1] % 60_000: p[2] for p in short})


def test_retention_drops_old_raw_but_keeps_rollups(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path, raw_retention_h=1)
    frames = frames_for(3 * 60 * 4)  # three hours at 15 s
    store.write(frames)
    end_ms = int(frames[-1].ts * 1000)
    store.maintain(end_ms)
    oldest = count(path, "SELECT min(ts) FROM samples")
    assert oldest >= end_ms - 3600_000
    assert count(path, "SELECT min(ts) FROM rollup_1m") < end_ms - 2 * 3600_000


def test_latest_alerts_annotations(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    frames = frames_for(10)
    store.write(frames)
    latest = store.latest("gpu_temp_c", 0)
    assert len(latest) == 4  # 2 nodes x 2 GPUs
    assert all(p[1] == int(frames[-1].ts * 1000) for p in latest)
    a = Alert("r/n/gpu0/1", "r", "critical", "c", "rk", "n", "gpu0", "firing", 1.0, 2.0, 90.0,
              "hot", fired_ts=2.0)
    store.write_alerts([a])
    store.write_alerts([dataclasses.replace(a, state="resolved", updated_ts=3.0, resolved_ts=3.0)])
    assert store.alerts() == []
    assert [x.state for x in store.alerts(("resolved",))] == ["resolved"]
    store.write_annotations([Annotation("fault", 10.0, 20.0, "n", "gpu0", "x")])
    assert len(store.annotations(0, 15)) == 1 and store.annotations(30, 40) == []


def _reader(path: str, rounds: int, out: multiprocessing.Queue) -> None:
    store = SqliteStore(path, read_only=True)
    start_ms = int(START * 1000)
    seen = []
    try:
        for _ in range(rounds):
            seen.append(len(store.range("gpu_power_w", start_ms, start_ms + 6 * 3600_000)))
        out.put(("ok", seen))
    except Exception as exc:  # report, don't hang the parent
        out.put(("error", repr(exc)))


def test_a_second_process_reads_while_this_one_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    frames = frames_for(400)
    store.write(frames[:8])
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    reader = ctx.Process(target=_reader, args=(str(path), 300, out))
    reader.start()
    for i in range(8, len(frames), 8):
        store.write(frames[i:i + 8])
    status, seen = out.get(timeout=60)
    reader.join(30)
    assert status == "ok", seen
    assert seen == sorted(seen), "a reader never sees data disappear"
    assert seen[0] >= 8


def test_read_only_store_that_does_not_exist(tmp_path: Path) -> None:
    from fleetwatch.pipeline.store import StoreError

    store = SqliteStore(tmp_path / "missing.db", read_only=True)
    with pytest.raises(StoreError, match="run `fleetwatch up` or `fleetwatch simulate` first"):
        store.latest("gpu_temp_c", 0)
