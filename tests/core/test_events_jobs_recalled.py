"""A processor that starts on a store another run wrote (``up --keep`` after ``simulate``,
a restart) starts from the jobs the store holds open on each GPU: a job no longer named
in the node's first frame ends at its last seen time (the node's newest stored sample;
there where none is known), one still named goes on (no second start), so the node page
does not list the earlier run's job beside the new one on the same GPUs."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.dashboards.job_data import read_current_jobs
from fleetwatch.pipeline.events import EventTracker
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_events import frame, gpu


def jobs(events: list[Event]) -> list[tuple[float, str, str, str]]:
    return [(e.ts, e.kind, e.device, e.value) for e in events
            if e.kind in ("job_start", "job_end")]


def _stored(kind: str, ts: float, device: str, job: str) -> Event:
    return Event(ts=ts, kind=kind, cluster="c", rack="rack-0", node="node-0", device=device,
                 value=job)


def test_a_tracker_ends_the_recalled_jobs_its_first_frame_no_longer_names() -> None:
    stored = [_stored("job_start", 1.0, "gpu0", "old"), _stored("job_start", 1.0, "gpu1", "old"),
              _stored("job_start", 2.0, "gpu1", "shared"),
              _stored("job_start", 1.0, "gpu2", "done"), _stored("job_end", 3.0, "gpu2", "done")]
    t = EventTracker()
    t.recall([("c", "node-0")], stored)
    out = t.update([frame(10, gpu(0, job="new"), gpu(1, job="shared"), gpu(2))])
    assert sorted(jobs(out)) == [(10, "job_end", "gpu0", "old"), (10, "job_end", "gpu1", "old"),
                                 (10, "job_start", "gpu0", "new")]
    # Nothing recalled: the first frame's jobs start, as before.
    fresh = EventTracker()
    assert jobs(fresh.update([frame(10, gpu(0, job="new"))])) == [
        (10, "job_start", "gpu0", "new")]


def test_a_second_run_on_the_store_closes_the_first_runs_jobs(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    t0 = round(time.time()) - 600.0
    first = Processor(store)  # simulate: job 1 on every GPU, then the run stops
    first.process([frame(t0 + k, gpu(0, job="1"), gpu(1, job="1")) for k in range(3)])
    second = Processor(store)  # up --keep: job 2 on the same GPUs
    second.process([frame(t0 + 300 + k, gpu(0, job="2"), gpu(1, job="2")) for k in range(3)])
    assert read_current_jobs(store, "node-0", t0 + 310) == {0: "2", 1: "2"}  # was "1,2"
    ends = [e for e in store.events(0, 2e9, kinds=["job_end"])]
    # last seen at its run's last frame, not stretched over the 5 minutes nothing ran
    assert {(e.device, e.value, e.ts) for e in ends} == {("gpu0", "1", t0 + 2),
                                                         ("gpu1", "1", t0 + 2)}
    third = Processor(store)  # a restart while job 2 runs: it goes on, no second start
    third.process([frame(t0 + 400, gpu(0, job="2"), gpu(1, job="2"))])
    assert len(store.events(0, 2e9, kinds=["job_start"])) == 4
    assert read_current_jobs(store, "node-0", t0 + 410) == {0: "2", 1: "2"}
    store.close()
