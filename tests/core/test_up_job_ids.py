"""``fleetwatch up --keep`` numbers the continued fleet's jobs after those the store holds,
as a scheduler's job ids go on, so that a second run's job is never merged with the first
run's job of the same id (one job page spanning both runs). A new timeline numbers them
from 4000001, as always, the same for one seed."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.events import jobs_of
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.simulate import simulate
from fleetwatch.up import continued_sim

T0 = 1_763_800_000.0
# Short jobs and idle gaps: many jobs start and end in half an hour.
PARAMS = SimParams(nodes=4, gpus=2, interval_s=15.0, job_mean_s=600.0, idle_mean_s=120.0)


def _ids(sim: FleetSim, steps: int) -> list[int]:
    seen: list[int] = []
    for _ in range(steps):
        sim.step()
        seen += [int(j.id) for j in sim.jobs.running.values() if int(j.id) not in seen]
    return seen


def test_a_new_timeline_numbers_its_jobs_from_4000001_and_first_job_id_moves_them() -> None:
    ids = _ids(FleetSim(PARAMS, T0), 40)
    assert min(ids) == 4_000_001 and ids == _ids(FleetSim(PARAMS, T0), 40)
    later = _ids(FleetSim(SimParams(**{**PARAMS.__dict__, "first_job_id": 4_000_500}), T0), 40)
    assert min(later) == 4_000_500 and [i - 499 for i in later] == ids


def _job_starts(path: Path) -> list[Event]:
    store = SqliteStore(path, read_only=True)
    try:
        return store.events(0.0, 1e11, kinds=["job_start", "job_end"])
    finally:
        store.close()


def test_a_continued_run_numbers_its_jobs_after_the_stored_ones(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    simulate(store, PARAMS, T0, 1800.0)
    store.close()
    first = {e.value for e in _job_starts(path) if e.kind == "job_start"}
    assert len(first) >= 3, first
    resume = T0 + 1800.0
    sim, _, _ = continued_sim(PARAMS, resume, [], str(path))
    store = SqliteStore(path)
    processor = Processor(store)
    while sim.ts + PARAMS.interval_s <= resume + 1800.0:
        sim.step()
        processor.process(sim.frames())
    processor.flush()
    store.close()
    second = {e.value for e in _job_starts(path) if e.kind == "job_start" and e.ts >= resume}
    assert second and min(int(j) for j in second) > max(int(j) for j in first)
    # The store's job history: no job of the first run goes on into the second.
    spans = jobs_of(_job_starts(path))
    assert all(start >= resume for _, _, job, start, _ in spans if job in second)


def test_simulate_into_a_store_of_an_earlier_span_numbers_its_jobs_after_them(
        tmp_path: Path) -> None:
    from fleetwatch.cli import main

    db = tmp_path / "h.db"
    base = ["simulate", "--store", str(db), "--duration", "1h", "--nodes", "2", "--gpus", "2",
            "--interval", "30s"]
    end = int(T0)
    assert main([*base, "--end", str(end)]) == 0
    first = {e.value for e in _job_starts(db) if e.kind == "job_start"}
    assert main([*base, "--end", str(end + 7200)]) == 0
    second = {e.value for e in _job_starts(db) if e.kind == "job_start"} - first
    assert second and min(int(j) for j in second) > max(int(j) for j in first)
