"""The store contract, samples: the newest point, ranges raw and as minute means, rewrites,
and the per-node reads a processor taking partitions over makes of them (``last_seen``,
``stopped_at``), on every backend."""

from __future__ import annotations

import dataclasses
from statistics import fmean

import pytest

from fleetwatch.frame import AGENT_STOPPED, HostReading
from fleetwatch.pipeline.store.sqlite import RAW_SPAN_MS
from fleetwatch.pipeline.stored_nodes import last_seen, stopped_at
from tests.store.backends import Backend
from tests.store.helpers import MINUTE_MS, cluster_name, frames, minute_ago, temp

TICKS = 180  # three whole minutes of 1 s frames


def mine(points: list, cluster: str) -> list:
    return [p for p in points if p[0].cluster == cluster]


def test_latest_gives_the_newest_point_of_every_series(backend: Backend) -> None:
    cluster, t0 = cluster_name(), minute_ago(30)
    assert backend.store.write(frames(cluster, t0, TICKS)) == TICKS * 2 * (2 * 2 + 2)
    backend.settle()
    last = t0 + (TICKS - 1) * 1000
    got = mine(backend.store.latest("gpu_temp_c", t0), cluster)
    assert [(p[0].node, p[0].device, p[1], p[2]) for p in got] == [
        (f"node-{n}", f"gpu{g}", last, temp(n, g, TICKS - 1)) for n in range(2) for g in range(2)]
    assert {p[0].rack for p in got} == {"rack-0"}
    assert mine(backend.store.latest("gpu_temp_c", last + 1), cluster) == []
    assert mine(backend.store.latest("gpu_temp_c", 0), cluster) == got  # "since ever"


def test_newest_ms_is_the_newest_stamp_in_the_window_of_a_cluster(backend: Backend) -> None:
    """What the stale banner and `fleetwatch alerts` ask on every page/run: one stamp, in
    [since, until], of one cluster or of all."""
    a, b, t0 = cluster_name(), cluster_name(), minute_ago(30)
    backend.store.write(frames(a, t0, 60) + frames(b, t0 + 120_000, 30, nodes=1))
    backend.settle()
    newest = backend.store.newest_ms
    last_a, last_b, until = t0 + 59_000, t0 + 149_000, t0 + 600_000
    assert newest("gpu_temp_c", t0, until, a) == last_a
    assert newest("gpu_temp_c", 0, until, b) == last_b  # "since ever"
    assert newest("host_cpu_util_pct", t0, until, a) == last_a
    assert newest("gpu_temp_c", t0, t0 + 30_000, a) == t0 + 30_000  # until: inclusive
    assert newest("gpu_temp_c", t0, t0 + 30_500, a) == t0 + 30_000
    assert newest("gpu_temp_c", last_a + 1, until, a) is None
    assert newest("no_such_metric", 0, until, a) is None
    assert newest("gpu_temp_c", t0, until, cluster_name()) is None
    got = newest("gpu_temp_c", t0, until)  # every cluster (the server may hold others')
    assert got is not None and got >= last_b


def test_short_range_is_raw_and_long_range_is_minute_means(backend: Backend) -> None:
    cluster, t0 = cluster_name(), minute_ago(30)
    backend.store.write(frames(cluster, t0, TICKS))
    backend.settle()
    raw = mine(backend.store.range("gpu_temp_c", t0 + 10_000, t0 + 70_000, node="node-1",
                                   device="gpu1"), cluster)
    assert [(p[1], p[2]) for p in raw] == [
        (t0 + k * 1000, temp(1, 1, k)) for k in range(10, 70)]
    assert {p[0].device for p in raw} == {"gpu1"}

    long = mine(backend.store.range("gpu_temp_c", t0 - RAW_SPAN_MS, t0 + TICKS * 1000,
                                    node="node-0"), cluster)
    by_series: dict[str, list[tuple[int, float]]] = {}
    for key, ts, value in long:
        by_series.setdefault(key.device, []).append((ts, value))
    assert sorted(by_series) == ["gpu0", "gpu1"]
    for g in range(2):
        expected = [(t0 + m * MINUTE_MS, fmean(temp(0, g, k) for k in range(m * 60, m * 60 + 60)))
                    for m in range(3)]
        got = by_series[f"gpu{g}"]
        assert [ts for ts, _ in got] == [ts for ts, _ in expected]
        assert [v for _, v in got] == pytest.approx([v for _, v in expected], abs=1e-9)


def test_range_of_a_node_keeps_to_the_cluster_asked(backend: Backend) -> None:
    """node-0 in two clusters is two machines: a range of one cluster's node-0 (short: raw,
    long: minute means) holds only that cluster's points."""
    a, b, t0 = cluster_name(), cluster_name(), minute_ago(30)
    backend.store.write(frames(a, t0, TICKS) + frames(b, t0, TICKS, nodes=1))
    backend.settle()
    short = backend.store.range("gpu_temp_c", t0, t0 + 60_000, node="node-0", cluster=a)
    assert {p[0].cluster for p in short} == {a}
    assert len(short) == 60 * 2
    long = backend.store.range("gpu_temp_c", t0 - RAW_SPAN_MS, t0 + TICKS * 1000,
                               node="node-0", device="gpu1", cluster=b)
    assert {(p[0].cluster, p[0].device) for p in long} == {(b, "gpu1")}
    assert len(long) == 3
    both = backend.store.range("gpu_temp_c", t0, t0 + 60_000, node="node-0")
    assert {a, b} <= {p[0].cluster for p in both}  # no cluster asked: every cluster's node-0


def test_rewriting_the_same_frames_keeps_one_point_per_timestamp(backend: Backend) -> None:
    cluster, t0 = cluster_name(), minute_ago(20)
    batch = frames(cluster, t0, 30)
    backend.store.write(batch)
    backend.store.write(batch[:40])  # a replay after a crash: the batch again, in part
    backend.settle()
    got = mine(backend.store.range("gpu_power_w", t0, t0 + 30_000, node="node-0",
                                   device="gpu0"), cluster)
    assert [p[1] for p in got] == [t0 + k * 1000 for k in range(30)]


def test_the_nodes_a_processor_expects_are_told_apart_by_cluster(backend: Backend) -> None:
    """``last_seen`` (the nodes of partitions taken over): node-0 of two clusters is two
    nodes, each with its own last time, on every backend."""
    east, west, t0 = cluster_name(), cluster_name(), minute_ago(30)
    backend.store.write(frames(east, t0, 5) + frames(west, t0, 3))
    backend.settle()
    seen = {k: v for k, v in last_seen(backend.store, t0 / 1000 - 1).items()
            if k[0] in (east, west)}
    assert seen == {(east, "node-0"): ("rack-0", t0 / 1000 + 4),
                    (east, "node-1"): ("rack-0", t0 / 1000 + 4),
                    (west, "node-0"): ("rack-0", t0 / 1000 + 2),
                    (west, "node-1"): ("rack-0", t0 / 1000 + 2)}


def test_the_nodes_whose_agent_stopped_cleanly_are_told_back(backend: Backend) -> None:
    """``stopped_at`` (a node's last clean stop, ``host_agent_stopped``): a processor that
    takes a partition over leaves a node drained before it unpaged, on every backend."""
    cluster, t0 = cluster_name(), minute_ago(40)
    written = frames(cluster, t0, 5)
    stop = written[-1]                              # node-1's last frame says it stopped
    written[-1] = dataclasses.replace(
        stop, host=HostReading({**stop.host.metrics, AGENT_STOPPED: 1.0}))
    backend.store.write(written)
    backend.settle()
    stops = {k: v for k, v in stopped_at(backend.store, t0 / 1000 - 1).items()
             if k[0] == cluster}
    assert stops == {(cluster, "node-1"): t0 / 1000 + 4}
    seen = last_seen(backend.store, t0 / 1000 - 1)
    assert seen[(cluster, "node-1")] == ("rack-0", t0 / 1000 + 4)
