from __future__ import annotations

import dataclasses
import multiprocessing
from pathlib import Path

import pytest

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.store import Alert, Annotation
from fleetwatch.pipeline.store.sqlite import SqliteStore

START = 1_763_800_000.0


def frames_for(steps: int, interval_s: float = 15.0, nodes: int = 2, gpus: int = 2) -> list:
    sim = FleetSim(SimParams(nodes=nodes, gpus=gpus, interval_s=interval_s), START)
    out = []
    for _ in range(steps):
        sim.step()
        out.extend(sim.frames())
    return out


def count(store: SqliteStore) -> int:
    return sum(1 for _ in store.export())


def raw_minutes(store: SqliteStore) -> dict:
    """(series, minute) → (count, sum, min, max), computed from the raw points."""
    out: dict = {}
    for key, ts, value in store.export():
        k = (key, ts - ts % 60_000)
        n, s, lo, hi = out.get(k, (0, 0.0, value, value))
        out[k] = (n + 1, s + value, min(lo, value), max(hi, value))
    return out


def rollup_rows(store: SqliteStore, metrics) -> dict:
    return {(key, m): (n, s, lo, hi) for metric in metrics
            for key, m, n, s, lo, hi in store.rollups(metric, 0, 1 << 62)}


def test_writes_are_idempotent(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    frames = frames_for(40)
    n = store.write(frames)
    assert n == count(store) == 40 * 2 * (2 * 36 + 5)
    store.write(frames[:17])  # a replay of part of it
    store.write(frames)
    assert count(store) == n


def test_rollups_equal_the_raw_aggregates(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    frames = frames_for(200, interval_s=7.0)  # 7 s does not divide a minute
    # batches that cut minutes at odd places, and one replayed
    for lo, hi in [(0, 13), (13, 14), (14, 151), (100, 151), (151, 400)]:
        store.write(frames[lo:hi])
    store.maintain(int(frames[-1].ts * 1000) + 10 * 60_000)  # every minute closed
    raw = raw_minutes(store)
    rolled = rollup_rows(store, {key.metric for key, _ in raw})
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
    oldest = min(ts for _, ts, _ in store.export())
    assert oldest >= end_ms - 3600_000
    assert min(r[1] for r in store.rollups("gpu_temp_c", 0, 1 << 62)) < end_ms - 2 * 3600_000


def test_retention_past_its_budget_leaves_the_rest_to_the_next_call(tmp_path: Path) -> None:
    """The processor waits for upkeep: at 8,000 GPUs a quarter of an hour's raw rows took
    35 s to delete in one transaction. Each call deletes a minute at a time, for its budget."""
    from fleetwatch.pipeline.store.sqlite_rollup import upkeep

    store = SqliteStore(tmp_path / "s.db", raw_retention_h=1)
    frames = frames_for(3 * 60 * 4)  # three hours at 15 s
    store.write(frames)
    end_ms = int(frames[-1].ts * 1000)
    conn = store._conn()
    first = min(ts for _, ts, _ in store.export())
    assert not upkeep(conn, end_ms, store.raw_retention_ms, store.rollup_retention_ms,
                      budget_s=0.0)  # one minute of rows, then the budget is spent
    assert min(ts for _, ts, _ in store.export()) == first + 60_000
    assert upkeep(conn, end_ms, store.raw_retention_ms, store.rollup_retention_ms)
    assert min(ts for _, ts, _ in store.export()) >= end_ms - 3600_000
    assert min(r[1] for r in store.rollups("gpu_temp_c", 0, 1 << 62)) == first - first % 60_000
    store.close()


def test_rollup_retention_drops_old_minutes_of_every_device(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", raw_retention_h=1, rollup_retention_d=1 / 24)
    frames = frames_for(3 * 60 * 4)  # three hours at 15 s, 2 nodes x 2 GPUs
    store.write(frames)
    end_ms = int(frames[-1].ts * 1000)
    before = store.rollups("host_cpu_util_pct", 0, 1 << 62)
    store.maintain(end_ms)
    kept = store.rollups("gpu_temp_c", 0, 1 << 62) + store.rollups("host_cpu_util_pct", 0,
                                                                     1 << 62)
    assert min(before, key=lambda r: r[1])[1] < end_ms - 2 * 3600_000
    assert min(r[1] for r in kept) >= end_ms - 3600_000
    # every device keeps its last hour: 4 GPUs and 2 hosts, ~58 closed minutes each
    assert {(r[0].node, r[0].device) for r in kept} == {
        (f"node-{i:03d}", d) for i in range(2) for d in ("gpu0", "gpu1", "host")}
    assert len(kept) >= 6 * 57


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


def test_a_device_whose_metric_set_changes_keeps_every_value(tmp_path: Path) -> None:
    from fleetwatch.frame import Frame, GpuReading

    store = SqliteStore(tmp_path / "s.db")
    t0 = START - START % 60  # a whole minute

    def frame(i: int, metrics: dict, state: str = "ok") -> Frame:
        return Frame("c", "r", "n", t0 + 10 * i, (GpuReading(0, "GPU-0", "m", metrics,
                                                             state=state),))

    frames = [frame(0, {"gpu_temp_c": 60.0, "gpu_power_w": 300.0}),
              frame(1, {"gpu_temp_c": 62.0}),                    # power no longer readable
              frame(2, {}, state="lost"),                        # GPU fell off the bus
              frame(3, {"gpu_temp_c": 64.0, "gpu_power_w": 310.0})]
    assert store.write(frames) == 5
    ms = int(t0 * 1000)
    temps = store.range("gpu_temp_c", ms, ms + 3600_000)
    assert [(p[1], p[2]) for p in temps] == [(ms + 10_000 * i, v)
                                             for i, v in [(0, 60.0), (1, 62.0), (3, 64.0)]]
    assert [p[2] for p in store.range("gpu_power_w", ms, ms + 3600_000)] == [300.0, 310.0]
    store.maintain(int(t0 * 1000) + 3600_000)
    ((_, minute, n, total, lo, hi),) = store.rollups("gpu_temp_c", 0, 1 << 62)
    assert (minute, n, total, lo, hi) == (int(t0 * 1000), 3, 186.0, 60.0, 64.0)


def test_count_is_every_point_once(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    frames = frames_for(12)
    store.write(frames)
    store.write(frames[:5])  # a replay adds nothing
    assert store.count() == count(store) == 12 * 2 * (2 * 36 + 5)


@pytest.mark.parametrize("content", [b"", b"not a database at all"])
def test_a_file_that_is_not_a_store_is_refused_in_words(tmp_path: Path, content: bytes) -> None:
    """An empty file (a `touch`) or another program's file crashed `alerts` and `up --keep`
    with 'no such table' in a traceback."""
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.up import newest_sample_s

    path = tmp_path / "x.db"
    path.write_bytes(content)
    store = SqliteStore(path, read_only=True)
    with pytest.raises(StoreError, match=r"x\.db is not a fleetwatch SQLite store"):
        store.alerts()
    store.close()
    if not content:  # `up --keep` on an empty file starts a new store there
        assert newest_sample_s(str(path)) is None


def test_raw_span_finds_samples_not_rolled_up_yet_over_any_span(tmp_path: Path) -> None:
    """What ``simulate`` checks before writing a history: raw samples count even where
    no minute is rolled up (a run killed before ``maintain``), over 12 h as over 1 min."""
    from fleetwatch.simulate import held_span

    frames = frames_for(20)
    store = SqliteStore(tmp_path / "s.db")
    store.write(frames)  # no maintain: no rollup
    first, last = min(f.ts for f in frames), max(f.ts for f in frames)
    assert store.raw_span(int(first * 1000), int(last * 1000) + 1) == (
        int(first * 1000), int(last * 1000))
    assert store.raw_span(int(last * 1000) + 1, int(last * 1000) + 12 * 3600_000) is None
    cluster = frames[0].cluster
    assert store.raw_span(int(first * 1000), int(last * 1000) + 1, cluster) == (
        int(first * 1000), int(last * 1000))
    assert store.raw_span(int(first * 1000), int(last * 1000) + 1, "another") is None
    store.close()
    assert held_span(str(tmp_path / "s.db"), first - 6 * 3600, first + 6 * 3600,
                     cluster) == (first, last)
    assert held_span(str(tmp_path / "s.db"), last, last + 12 * 3600, cluster) is None
    # Another cluster's samples are no obstacle to a history of this one.
    assert held_span(str(tmp_path / "s.db"), first - 6 * 3600, first + 6 * 3600,
                     "another") is None
