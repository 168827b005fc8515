"""The utilization page's data: CDFs of minute means read in one pass (not every sample
of the fleet), the ledger panels scoped to the node and GPU the URL names, and hints
that say what is drawn."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from fleetwatch.dashboards import utilization
from fleetwatch.pipeline.store.base import gpu_index
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.energy_fleet import fill
from tests.store.helpers import frames

NOW = 1_763_800_000.0
START_MS, END_MS = int((NOW - 3600) * 1000), int((NOW + 120) * 1000)
METRICS = [m for m, _, _, _ in utilization.CDFS]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    path = tmp_path_factory.mktemp("util") / "u.db"
    fill(path, nodes=4, hours=2, now=NOW)
    writer = SqliteStore(path)
    writer.maintain(int((NOW + 600) * 1000))  # roll up every closed minute
    writer.close()
    return SqliteStore(path, read_only=True)


def minute_means_from_samples(store: SqliteStore, metric: str, node: str | None = None,
                              device: str | None = None) -> dict[str, list[float]]:
    """Per cluster, each GPU's mean of each minute that starts in the range, computed here
    from the raw samples."""
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0])
    for key, ts, value in store._raw(metric, START_MS, END_MS,
                                     store._devices(node, device)):
        if gpu_index(key.device) is not None and ts - ts % 60_000 >= START_MS:
            s = sums[(key.cluster, key.node, key.device, ts - ts % 60_000)]
            s[0] += value
            s[1] += 1
    out: dict[str, list[float]] = defaultdict(list)
    for (cluster, *_), (total, n) in sums.items():
        out[cluster].append(total / n)
    return {c: sorted(v) for c, v in out.items()}


def as_sorted(groups: dict[str, np.ndarray]) -> dict[str, list[float]]:
    return {c: sorted(v.tolist()) for c, v in groups.items()}


def test_fleet_cdfs_are_minute_means_of_the_samples(store: SqliteStore) -> None:
    got, basis, _ = utilization.cdf_samples(store, START_MS, END_MS, None, None)
    assert basis == utilization.MINUTE_MEANS
    for metric in METRICS:
        want = minute_means_from_samples(store, metric)
        assert set(got[metric]) == {"train-a", "train-b"} == set(want)
        for cluster, values in as_sorted(got[metric]).items():
            assert values == pytest.approx(want[cluster], rel=1e-9)


def test_a_gpus_cdfs_are_that_gpus_minute_means(store: SqliteStore) -> None:
    got, basis, _ = utilization.cdf_samples(store, START_MS, END_MS, "node-001", 3)
    want = minute_means_from_samples(store, "gpu_power_w", "node-001", "gpu3")
    assert basis == utilization.MINUTE_MEANS
    # Both simulated clusters have a node-001: one GPU 3 each, 60 minutes each.
    assert set(got["gpu_power_w"]) == set(want) == {"train-a", "train-b"}
    for cluster, values in as_sorted(got["gpu_power_w"]).items():
        assert len(values) == 60 and values == pytest.approx(want[cluster], rel=1e-9)
    nothing, _, _ = utilization.cdf_samples(store, START_MS, END_MS, "node-999", 3)
    assert not any(nothing.values())


def test_a_store_without_rollups_yet_draws_its_samples(tmp_path: Path) -> None:
    writer = SqliteStore(tmp_path / "young.db")
    t0 = START_MS + 600_000
    writer.write(frames("c", t0, ticks=20, nodes=2, gpus=2))  # 20 s: no minute closed
    got, basis, _ = utilization.cdf_samples(writer, START_MS, END_MS, None, None)
    assert basis == utilization.SAMPLES
    assert sorted(got["gpu_power_w"]["c"].tolist()) == sorted(
        100.0 + t + 0.25 * g for t in range(20) for g in range(2) for _ in range(2))


def test_jobs_and_idle_share_are_scoped_to_the_node_and_gpu(store: SqliteStore) -> None:
    start, end = NOW - 7200, NOW + 3600
    fleet_clusters, fleet_jobs = utilization.ledger_totals(store, start, end, None, None)
    rows = [r for r in store.energy(start, end, node="node-001") if r.device == "gpu3"]
    clusters, jobs = utilization.ledger_totals(store, start, end, "node-001", 3)
    assert {t.name for t in jobs} == {r.job for r in rows}
    assert {t.name for t in jobs} < {t.name for t in fleet_jobs}
    assert sum(t.gpu_s for t in clusters) == pytest.approx(sum(r.seconds for r in rows))
    assert sum(t.idle_s for t in clusters) == pytest.approx(sum(r.idle_s for r in rows))
    # The node's GPUs, summed over every node, are the fleet's GPU time.
    nodes = {r.node for r in store.energy(start, end)}
    per_node = sum(t.gpu_s for n in nodes
                   for t in utilization.ledger_totals(store, start, end, n, None)[0])
    assert per_node == pytest.approx(sum(t.gpu_s for t in fleet_clusters))
    assert utilization.ledger_totals(store, start, end, "node-999", 3) == ([], [])


def hints(page) -> dict[str, str]:
    out: dict[str, str] = {}

    def walk(c) -> None:
        if getattr(c, "className", None) == "panel-hint" and getattr(c, "id", None):
            out[c.id] = c.children
        for child in (getattr(c, "children", None) or []) if not isinstance(
                getattr(c, "children", None), str) else []:
            walk(child)
    walk(page)
    return out


def test_hints_say_what_is_drawn_and_what_it_covers() -> None:
    fleet = hints(utilization.layout(5, "?range=1h"))
    assert fleet["util-hint-gpu_power_w"] == "CDF · per cluster · minute means"
    assert "of" not in fleet["util-jobs-hint"].split("share")[1].split("in the")[0]
    scoped = hints(utilization.layout(5, "?range=1h&node=node-001&gpu=3"))
    assert "of node-001 · GPU 3" in scoped["util-idle-hint"]
    assert "of node-001 · GPU 3" in scoped["util-jobs-hint"]
