"""Training from frames in memory equals training from a store written those frames."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.history import GPU_METRICS, FrameDays, read_day
from fleetwatch.models.artifact import load
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.train import thermal_rows, train, train_frames

START = 1_763_800_000.0  # not on a minute boundary: the first minute is partial
PARAMS = SimParams(nodes=4, gpus=4, nodes_per_rack=2, seed=3, interval_s=15.0)
HOURS = 8.0


class RangeOnly:
    """A store seen through the ``Store`` protocol's ``range`` alone."""

    def __init__(self, store: SqliteStore) -> None:
        self.range = store.range


def test_frames_and_store_give_the_same_grids_and_the_same_model(tmp_path: Path) -> None:
    sim = FleetSim(PARAMS, START)
    store = SqliteStore(tmp_path / "history.db")
    end = START + HOURS * 3600
    history = FrameDays(START, end)
    while sim.ts < end - 1:
        sim.step()
        frames = sim.frames()
        store.write(frames)
        history.add(frames[::-1])  # arrival order must not matter
    store.maintain(int((end + 600) * 1000))  # the store's own rollup of the last minutes
    from_store = read_day(store, int(START * 1000), int(end * 1000))
    [from_frames] = list(history.days())
    # A store with no bulk read (``range`` only, as every backend has) gives the same grids.
    by_range = read_day(RangeOnly(store), int(START * 1000), int(end * 1000))
    assert by_range.gpus == from_store.gpus
    for m in GPU_METRICS:
        assert np.array_equal(by_range.values[m], from_store.values[m], equal_nan=True), m
    assert from_frames.gpus == from_store.gpus and len(from_store.gpus) == 16
    assert np.array_equal(from_frames.minutes, from_store.minutes)
    for m in GPU_METRICS:
        assert np.array_equal(from_frames.values[m], from_store.values[m], equal_nan=True), m
    assert np.array_equal(from_frames.inlet, from_store.inlet, equal_nan=True)

    by_store, _ = train(store, START, end, tmp_path / "a")
    by_frames, _ = train_frames(history, START, end, tmp_path / "b")
    store.close()
    a, b = load(by_store), load(by_frames)
    assert a.thermal.kind == b.thermal.kind
    assert a.thermal.offsets.keys() == b.thermal.offsets.keys()
    assert np.allclose(list(a.thermal.offsets.values()), list(b.thermal.offsets.values()),
                       atol=1e-6)
    assert abs(a.thermal.spread_c - b.thermal.spread_c) < 1e-6
    rows = thermal_rows(from_store)[0]
    assert np.array_equal(a.thermal.expected(rows), b.thermal.expected(rows))
    assert a.anomaly is not None and b.anomaly is not None
    assert a.anomaly.windows == b.anomaly.windows
    for p in a.anomaly.center:
        assert np.allclose(a.anomaly.center[p], b.anomaly.center[p])


def test_frames_outside_the_range_are_not_trained_on() -> None:
    sim = FleetSim(PARAMS, START)
    history = FrameDays(START + 3600, START + 7200)
    for _ in range(int(3 * 3600 / PARAMS.interval_s)):
        sim.step()
        history.add(sim.frames())
    [day] = list(history.days())
    assert len(day.minutes) == 60
    assert not np.isnan(day.values["gpu_temp_c"]).all()
    # Only the minutes that start in [start, end), each whole.
    assert int(day.minutes[-1]) < (START + 7200) * 1000


def test_jobs_seed_keeps_the_hardware_and_changes_the_history() -> None:
    a = FleetSim(PARAMS, START)
    b = FleetSim(dataclasses.replace(PARAMS, jobs_seed=1), START)
    for name in ("r_th", "p_idle", "p_dyn", "tau", "hot_offset", "node_offset", "rack_offset"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.uuids == b.uuids
    for _ in range(240):
        a.step()
        b.step()
    assert not np.array_equal(a.act["sm"], b.act["sm"])
    # Without jobs_seed the simulator is what it was: one stream, deterministic.
    c = FleetSim(PARAMS, START)
    for _ in range(240):
        c.step()
    assert np.array_equal(a.temp, c.temp)


def test_samples_as_arrays_give_the_grids_the_frames_give() -> None:
    """``gpu_samples`` + ``add_samples`` (the evaluation's training history) against the
    frames themselves, on a fleet with lost GPUs and silent nodes (faults)."""
    from fleetwatch.collectors.sim.faults import Fault
    from fleetwatch.collectors.sim.frames import gpu_samples

    faults = [Fault("xid79", "node-001", 2, 1800.0, 3600.0, mode="sudden"),  # falls off the bus
              Fault("node_silent", "node-002", None, 2400.0, 1800.0, mode="sudden")]
    sim = FleetSim(PARAMS, START, faults)
    end = START + 3 * 3600
    frames, arrays = FrameDays(START, end), FrameDays(START, end)
    lost = silent = 0
    while sim.ts < end - 1:
        sim.step()
        frames.add(sim.frames())
        arrays.add_samples(sim.ts, *gpu_samples(sim, GPU_METRICS))
        lost += int(sim.lost.sum())
        silent += int(sim.mods.drop.sum())
    assert lost and silent  # the faults took effect
    for a, b in zip(frames.days(), arrays.days(), strict=True):
        assert a.gpus == b.gpus
        assert np.array_equal(a.inlet, b.inlet, equal_nan=True)
        for m in GPU_METRICS:
            assert np.array_equal(a.values[m], b.values[m], equal_nan=True), m
