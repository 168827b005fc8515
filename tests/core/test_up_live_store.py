"""``fleetwatch up --keep --store PATH`` onto a store that processors of a real fleet write
is refused (unless --into-live-store): it wrote a simulated cluster among the real one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.up import LIVE_S, UpError, UpOptions, sim_start
from fleetwatch.up_timeline import newest_sample_s
from tests.core.test_up import run_cli
from tests.servers import free_port


def real_store(path: Path, age_s: float) -> int:
    """A store a processor of cluster "so" wrote, its newest sample ``age_s`` old; its rows."""
    store = SqliteStore(path)
    now = time.time() - age_s
    store.write([Frame("so", "r1", f"node-{n:02d}", now - 5 * k,
                       (GpuReading(0, f"GPU-{n}", "H100", {"gpu_temp_c": 50.0}),))
                 for n in range(3) for k in range(4)])
    count = store._conn().execute("SELECT count(*) FROM samples").fetchone()[0]
    store.close()
    return int(count)


def test_up_keep_refuses_a_store_live_processors_write(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    rows = real_store(db, 20.0)
    result = run_cli(tmp_path, "up", "--simulate", "--keep", "--store", str(db), "--port",
                     str(free_port()))
    assert result.returncode == 2, result.stderr
    assert f"the store {db} is written by something else: cluster(s) so (newest sample " \
        in result.stderr
    assert "--store NEW.db" in result.stderr and "--into-live-store" in result.stderr
    store = SqliteStore(db, read_only=True)
    try:  # nothing written: no sample of the simulated cluster
        assert store._conn().execute("SELECT count(*) FROM samples").fetchone()[0] == rows
    finally:
        store.close()


def test_an_old_store_or_the_explicit_flag_is_continued(tmp_path: Path) -> None:
    now = time.time()
    old = tmp_path / "old.db"
    real_store(old, LIVE_S + 60)  # nothing written for 16 minutes: not live
    assert sim_start(str(old), UpOptions(keep=True), now, "sim") <= now
    live = tmp_path / "live.db"
    real_store(live, 20.0)
    with pytest.raises(UpError, match="cluster.s. so"):
        sim_start(str(live), UpOptions(keep=True), now, "sim")
    assert sim_start(str(live), UpOptions(keep=True, into_live_store=True), now, "sim") <= now
    # The simulated cluster's name is no pass: real nodes of cluster "so" wrote it.
    with pytest.raises(UpError, match=r"cluster.s. so \(node node-00\)"):
        sim_start(str(live), UpOptions(keep=True), now, "so")


def sim_store(path: Path, age_s: float) -> None:
    """A store an earlier ``up`` of cluster "sim" wrote: the simulator's node names."""
    store = SqliteStore(path)
    now = time.time() - age_s
    store.write([Frame("sim", "rack-00", f"node-{n:03d}", now - 5 * k,
                       (GpuReading(0, f"GPU-{n}", "H100", {"gpu_temp_c": 50.0}),))
                 for n in range(3) for k in range(4)])
    store.close()


def test_an_earlier_simulation_of_its_own_cluster_is_continued(tmp_path: Path) -> None:
    now = time.time()
    db = tmp_path / "sim.db"
    sim_store(db, 20.0)
    assert sim_start(str(db), UpOptions(keep=True), now, "sim") <= now


def test_up_keep_refuses_a_live_cluster_of_the_simulated_clusters_name(
        tmp_path: Path) -> None:
    """A real agent (node "vm") of cluster "so": `up --keep --cluster so` wrote simulated
    nodes into the live cluster."""
    db = tmp_path / "store.db"
    rows = real_store(db, 20.0)
    result = run_cli(tmp_path, "up", "--simulate", "--keep", "--store", str(db), "--cluster",
                     "so", "--port", str(free_port()))
    assert result.returncode == 2, result.stderr
    assert f"the store {db} is written by something else: cluster(s) so (node node-0" \
        in result.stderr
    assert "--into-live-store" in result.stderr
    store = SqliteStore(db, read_only=True)
    try:
        assert store._conn().execute("SELECT count(*) FROM samples").fetchone()[0] == rows
    finally:
        store.close()


def test_a_kept_shared_store_continues_from_the_simulated_clusters_own_newest_sample(
        tmp_path: Path) -> None:
    """A store `up` (cluster "sim") and a live processor (cluster "so") both write: a
    restarted `up --keep --into-live-store` goes on from sim's newest sample, not from the
    other cluster's newer one (which left a hole in sim's data at the seam)."""
    now = time.time()
    db = tmp_path / "shared.db"
    sim_store(db, 240.0)  # sim stopped 4 minutes ago
    real_store(db, 5.0)  # the other cluster wrote on since
    sim_newest = now - 240.0
    start = sim_start(str(db), UpOptions(keep=True, into_live_store=True, backfill_s=600.0),
                      now, "sim")
    assert abs(start - sim_newest) < 1.0
    assert newest_sample_s(str(db), "sim") == pytest.approx(sim_newest, abs=1.0)
    assert newest_sample_s(str(db), "so") == pytest.approx(now - 5.0, abs=1.0)
    # A cluster the store holds nothing of starts its backfill, as in a new store.
    start = sim_start(str(db), UpOptions(keep=True, into_live_store=True, backfill_s=600.0),
                      now, "other")
    assert start == pytest.approx(now - 600.0)


def test_into_a_live_store_up_warns_that_alerts_may_be_notified_twice(tmp_path: Path) -> None:
    from fleetwatch.up import live_store_warning

    now = time.time()
    live = tmp_path / "live.db"
    real_store(live, 20.0)
    said = live_store_warning(str(live), UpOptions(keep=True, into_live_store=True), now,
                              "sim")
    assert said.startswith("warning: cluster(s) so write this store live")
    assert "duplicate pages" in said and "--store NEW.db" in said
    # Not said of a store nobody else writes now, nor without --into-live-store.
    assert live_store_warning(str(live), UpOptions(keep=True), now, "sim") == ""
    old = tmp_path / "old.db"
    real_store(old, LIVE_S + 60)
    assert live_store_warning(str(old), UpOptions(keep=True, into_live_store=True), now,
                              "sim") == ""
