"""A metric's mean per rack over time (the facility page's lines), as each store bins it
(SQLite in numpy, VictoriaMetrics and InfluxDB on the server),
against the same numbers computed by hand from the samples written."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.servers import Server
from tests.store.conftest import DATABASE
from tests.store.helpers import cluster_name, force_flush, frames, minute_ago, temp

TICKS, STEP_MS = 180, 60_000  # three minutes of one frame a second; one-minute bins


def by_hand(t0: int, bins: int, step_ms: int = STEP_MS) -> dict[tuple[str, str], list[float]]:
    """Per rack (frames(): node-0/1 in rack-0, node-2/3 in rack-1, 2 GPUs each) and bin:
    the mean over the rack's GPUs of each GPU's mean temperature in the bin."""
    out: dict[tuple[str, str], list[float]] = {}
    for rack, nodes in (("rack-0", (0, 1)), ("rack-1", (2, 3))):
        line = []
        for b in range(bins):
            ticks = [k for k in range(TICKS) if b * step_ms <= k * 1000 < (b + 1) * step_ms]
            gpus = [sum(temp(n, g, k) for k in ticks) / len(ticks) for n in nodes for g in (0, 1)]
            line.append(sum(gpus) / len(gpus))
        out[rack] = line
    return out


def _check(got, cluster: str, t0: int, bins: int, step_ms: int = STEP_MS) -> None:
    want = by_hand(t0, bins, step_ms)
    assert got.bins == bins and got.start_ms == t0 and got.step_ms == step_ms
    assert set(got.means) == {(cluster, "rack-0"), (cluster, "rack-1")}
    for rack, line in want.items():
        assert got.means[cluster, rack] == pytest.approx(line, abs=1e-9)


@pytest.mark.parametrize("rolled_up", [False, True])
def test_sqlite_rack_means_from_samples_and_from_rollups(tmp_path: Path, rolled_up: bool) -> None:
    cluster, t0 = cluster_name(), minute_ago(10)
    store = SqliteStore(tmp_path / "s.db")
    store.write(frames(cluster, t0, TICKS, nodes=4))
    store.write(frames("other", t0, TICKS, nodes=4))  # another cluster's racks of those names
    if rolled_up:  # the minutes closed: read from the one-minute means, the tail none
        store.maintain(int(time.time() * 1000))
        assert store.rollups("gpu_temp_c", t0, t0 + 3 * 60_000)
    reader = SqliteStore(tmp_path / "s.db", read_only=True)
    _check(reader.rack_means("gpu_temp_c", t0, t0 + 3 * 60_000, STEP_MS, cluster=cluster),
           cluster, t0, 3)
    # A bin of three minutes: still the mean of each GPU's mean, not of the minute means.
    _check(reader.rack_means("gpu_temp_c", t0, t0 + 3 * 60_000, 3 * STEP_MS, cluster=cluster),
           cluster, t0, 1, 3 * STEP_MS)
    both = reader.rack_means("gpu_temp_c", t0, t0 + 3 * 60_000, STEP_MS)
    assert {c for c, _ in both.means} == {cluster, "other"}


def test_victoria_rack_means_summed_by_the_server(victoria: Server) -> None:
    cluster, t0 = cluster_name(), minute_ago(10)
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    store.write(frames(cluster, t0, TICKS, nodes=4))
    force_flush(victoria.address)
    _check(store.rack_means("gpu_temp_c", t0, t0 + 3 * 60_000, STEP_MS, cluster=cluster),
           cluster, t0, 3)
    _check(store.rack_means("gpu_temp_c", t0, t0 + 3 * 60_000, 3 * STEP_MS, cluster=cluster),
           cluster, t0, 1, 3 * STEP_MS)
    none = store.rack_means("gpu_temp_c", t0, t0 + 3 * 60_000, STEP_MS, cluster=cluster_name())
    assert none.means == {}
    store.close()


def test_influxdb_rack_means_from_the_servers_means_per_device(influxdb: Server) -> None:
    # A start on a multiple of the step, as the page's bins are (InfluxDB's GROUP BY time
    # buckets start on one).
    cluster, t0 = cluster_name(), minute_ago(10) // (3 * STEP_MS) * (3 * STEP_MS)
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=DATABASE, api="v1")
    store.write(frames(cluster, t0, TICKS, nodes=4))
    time.sleep(0.5)
    _check(store.rack_means("gpu_temp_c", t0, t0 + 3 * 60_000, STEP_MS, cluster=cluster),
           cluster, t0, 3)
    _check(store.rack_means("gpu_temp_c", t0, t0 + 3 * 60_000, 3 * STEP_MS, cluster=cluster),
           cluster, t0, 1, 3 * STEP_MS)
    store.close()


def test_sqlite_long_bins_read_evenly_spaced_minutes(tmp_path: Path) -> None:
    """A bin of 20 minutes reads 5 of them (every fourth minute): each GPU's mean of those
    minutes' means, then the rack's mean of its GPUs (a week of 1,000 GPUs: 1,200 minutes of
    each device, not 10,080)."""
    step = 20 * 60_000
    cluster, t0 = cluster_name(), minute_ago(30) // step * step
    store = SqliteStore(tmp_path / "s.db")
    ticks = 20 * 60
    store.write(frames(cluster, t0, ticks, nodes=4))
    store.maintain(int(time.time() * 1000))
    got = SqliteStore(tmp_path / "s.db", read_only=True).rack_means(
        "gpu_temp_c", t0, t0 + step, step, cluster=cluster)
    for rack, nodes in (("rack-0", (0, 1)), ("rack-1", (2, 3))):
        gpus = []
        for n in nodes:
            for g in (0, 1):
                minutes = [sum(temp(n, g, k) for k in range(m * 60, m * 60 + 60)) / 60
                           for m in range(0, 20, 4)]
                gpus.append(sum(minutes) / len(minutes))
        assert got.means[cluster, rack] == pytest.approx([sum(gpus) / len(gpus)], abs=1e-9)
