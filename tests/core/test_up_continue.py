"""``fleetwatch up --keep`` continues the simulated fault and the fleet's temperatures at the
seam, instead of starting the fault again from the restart with a cold fleet."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from fleetwatch.collectors.sim import Fault, FleetSim, SimParams
from fleetwatch.pipeline.store.base import Annotation
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.simulate import continued_faults, simulate
from fleetwatch.up import continued_sim
from tests.core.test_up import start_up, stop, wait_for_line, wait_for_samples
from tests.servers import free_port

T0 = 1_763_800_000.0
COOLING = Fault("cooling", "node-001", 3, 120.0, 6 * 3600.0)


def test_a_stored_fault_still_on_keeps_its_window_an_ended_one_is_not_replayed() -> None:
    text = "injected cooling fault (sudden, x2)"
    past = Annotation("fault", T0 + 60, T0 + 660, "node-000", "gpu1", text)
    stored = [Annotation("fault", T0 + 120, T0 + 120 + 6 * 3600, "node-001", "gpu3", text),
              past]
    assert COOLING.resolved_severity == 2.0 and COOLING.resolved_mode == "sudden"
    ended = Fault("cooling", "node-000", 1, 60.0, 600.0)            # its window is over
    other = Fault("cooling", "node-001", 3, 120.0, 6 * 3600.0, severity=3.0)  # not the same
    resume = T0 + 1800
    fixed, continued, done = continued_faults([COOLING, ended, other], stored, resume)
    # The ended one already happened in this timeline: a restart does not repeat it.
    assert [f.onset_ts for f in fixed] == [T0 + 120, resume + 120]
    assert continued == [True, False]
    assert done == [(ended, past)]


def gpu3_temps(path: Path, start: float, end: float) -> list[float]:
    store = SqliteStore(path, read_only=True)
    try:
        return [v for key, ts, v in sorted(store.export(), key=lambda r: r[1])
                if key.metric == "gpu_temp_c" and key.node == "node-001"
                and key.device == "gpu3" and start <= ts / 1000 <= end]
    finally:
        store.close()


def test_a_continued_fleet_goes_on_from_the_stored_temperatures(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    params = SimParams(nodes=2, gpus=4, interval_s=5.0, steady_load=True)
    store = SqliteStore(path)
    simulate(store, params, T0, 1800.0, [COOLING])  # 30 min: GPU 3 at its slowdown point
    store.close()
    before = gpu3_temps(path, T0 + 1740, T0 + 1800)
    assert min(before) >= 85.0, before
    resume = T0 + 1800

    def first_minute(sim: FleetSim) -> list[float]:
        out = []
        for _ in range(12):
            sim.step()
            out.append(float(sim.temp_read[1, 3]))
        return out

    sim, notes, _ = continued_sim(params, resume, [COOLING], str(path))
    assert sim.ground_truth[0].onset_ts == T0 + 120 and notes == [" (continued from the store)"]
    after = first_minute(sim)
    assert abs(np.mean(after) - np.mean(before)) < 3.0, (before, after)
    # What a restart did before: the fault began again, on a cold fleet.
    cold = first_minute(FleetSim(params, resume, [COOLING]))
    assert np.mean(before) - np.mean(cold) > 20.0, (before, cold)


def test_keep_continues_only_its_own_clusters_fault(tmp_path: Path) -> None:
    """The same fault stored for another cluster's same-named node is not this fleet's."""
    path = tmp_path / "s.db"
    params = SimParams(nodes=2, gpus=4, interval_s=5.0, steady_load=True, cluster="east")
    store = SqliteStore(path)
    simulate(store, SimParams(nodes=2, gpus=4, interval_s=5.0, steady_load=True,
                              cluster="west"), T0, 600.0, [COOLING])
    store.close()
    _, notes, _ = continued_sim(params, T0 + 600, [COOLING], str(path))
    assert notes == [" (a new one: the store holds none of it that is still on)"]
    _, notes, _ = continued_sim(dataclasses.replace(params, cluster="west"), T0 + 600,
                             [COOLING], str(path))
    assert notes == [" (continued from the store)"]


def test_keep_says_the_fault_is_continued_with_its_first_onset(tmp_path: Path) -> None:
    db = tmp_path / "fleetwatch-sim.db"
    said: list[list[str]] = []
    banner: list[str] = []
    for run in range(2):
        proc = start_up(tmp_path, "--keep", "--port", str(free_port()), "--speed", "300",
                        "--backfill", "10m")
        lines = wait_for_line(proc, "dashboard:")
        said.append([line.strip() for line in lines if "injected fault" in line])
        banner.append(next(line for line in lines if "store:" in line))
        wait_for_samples(db, 20 * (run + 1))
        code, out = stop(proc)
        assert code == 0, out
    (first,), (second,) = said
    assert re.fullmatch(r"injected fault: cooling on node-001 GPU 1, from \S+ for 6 h", first)
    assert second == first + " (continued from the store)"
    # The first --keep found no store: it says so, not "continued" (there was nothing).
    assert "--keep: no data to continue, a new store" in banner[0], banner
    assert re.search(r"continued from its newest sample \(cluster \w+\), "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", banner[1].rstrip()), banner


def fault_annotations_in(db: Path) -> list[Annotation]:
    store = SqliteStore(db, read_only=True)
    try:
        return [a for a in store.annotations(0, 1e11) if a.kind == "fault"]
    finally:
        store.close()


def test_keep_with_the_same_fault_flag_does_not_replay_an_ended_fault(tmp_path: Path) -> None:
    db = tmp_path / "fleetwatch-sim.db"
    flags = ("--keep", "--speed", "600", "--backfill", "20m", "--fault",
             "cooling:node-001/1@1m+3m")
    proc = start_up(tmp_path, *flags, "--port", str(free_port()))
    wait_for_line(proc, "dashboard:")
    wait_for_samples(db, 12 * 10)  # 10 simulated minutes: the fault (1 to 4 min) is over
    code, out = stop(proc)
    assert code == 0, out
    (first,) = fault_annotations_in(db)
    proc = start_up(tmp_path, *flags, "--port", str(free_port()))
    lines = wait_for_line(proc, "dashboard:")
    wait_for_samples(db, 12 * 10 + 24)
    code, out = stop(proc)
    assert code == 0, out
    # The store's timeline holds the incident once: the restart neither injects it again
    # nor writes a second window.
    assert fault_annotations_in(db) == [first]
    said = [line.strip() for line in lines]
    assert not any(line.startswith("injected fault") for line in said), said
    (note,) = [line for line in said if line.startswith("not injected again")]
    assert re.fullmatch(
        r"not injected again: cooling on node-001 GPU 1, which already ran in this store's "
        r"timeline \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d for 3 min\); a new store "
        r"\(--store NEW\.db\) runs it afresh",
        note), note
