"""A job the store holds open that started more than ``JOB_RECALL_S`` (a week) before a
processor starts, and that its first frames no longer name, is ended like a newer one
(``up --keep`` on a store an earlier run left ten days ago; a restart after a long
stop): at its last seen time, the node's newest stored sample before the start, not
left open for ever, nor stretched over the time nothing was watched."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.dashboards.job_data import read_current_jobs
from fleetwatch.pipeline.board_recall import JOB_RECALL_S
from fleetwatch.pipeline.events import EventTracker, jobs_of
from fleetwatch.pipeline.job_recall import unknown_slots
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_events import frame, gpu
from tests.core.test_events_jobs_recalled import jobs
from tests.servers import Server

DAY = 86400.0


def _stored(kind: str, ts: float, device: str, job: str) -> Event:
    return Event(ts=ts, kind=kind, cluster="c", rack="rack-0", node="node-0", device=device,
                 value=job)


def test_the_tracker_ends_a_recalled_job_at_the_nodes_last_seen_time() -> None:
    t = EventTracker()
    t.recall([("c", "node-0")], [_stored("job_start", 1.0, "gpu0", "old")],
             seen={("c", "node-0"): 4.0})
    assert jobs(t.update([frame(10, gpu(0, job="new"))])) == [
        (4.0, "job_end", "gpu0", "old"), (10, "job_start", "gpu0", "new")]
    # Its last sample later than the first frame (frames out of order): the frame's time.
    late = EventTracker()
    late.recall([("c", "node-0")], [_stored("job_start", 1.0, "gpu0", "old")],
                seen={("c", "node-0"): 12.0})
    assert jobs(late.update([frame(10, gpu(0))])) == [(10, "job_end", "gpu0", "old")]


def test_slots_without_a_job_event_in_the_week_are_those_to_look_further_back() -> None:
    f = frame(10, gpu(0, job="a"), gpu(1), gpu(2))
    week = [_stored("job_start", 5.0, "gpu0", "a"), _stored("job_end", 6.0, "gpu2", "b")]
    assert unknown_slots([f], [("c", "node-0")], week) == {("c", "node-0"): {1}}
    assert unknown_slots([f], [("c", "node-0")], [
        *week, _stored("job_start", 5.0, "gpu1", "c")]) == {}


@pytest.mark.parametrize("rolled_up", [False, True])
def test_a_processor_ends_a_job_older_than_a_week_at_its_last_seen_time(
        tmp_path: Path, rolled_up: bool) -> None:
    """``rolled_up``: the store's upkeep ran since (minute rollups, raw samples past their
    retention deleted), else the run was killed before it (raw samples only)."""
    store = SqliteStore(tmp_path / "s.db", raw_retention_h=24.0)
    t0 = round(time.time()) - 10 * DAY
    assert 10 * DAY > JOB_RECALL_S
    first = Processor(store)  # a run ten days ago: job 1 on both GPUs, then it stops
    first.process([frame(t0 + 15 * k, gpu(0, job="1"), gpu(1, job="1")) for k in range(5)])
    first.flush()
    now = round(time.time())
    if rolled_up:
        store.maintain(now * 1000)
        assert store.range("gpu_temp_c", (t0 - 1) * 1000, (t0 + 61) * 1000) == []  # no raw
    last = t0 + 60 if not rolled_up else (t0 + 60) // 60 * 60  # a minute's start
    second = Processor(store)  # a processor now: job 2 on GPU 0, GPU 1 idle
    second.process([frame(now + k, gpu(0, job="2"), gpu(1)) for k in range(3)])
    ends = {(e.device, e.value, e.ts) for e in store.events(0, 2e9, kinds=["job_end"])}
    assert ends == {("gpu0", "1", last), ("gpu1", "1", last)}
    spans = {(d, j, s, e) for _, d, j, s, e in jobs_of(
        store.events(0, 2e9, kinds=["job_start", "job_end"]))}
    assert spans == {("gpu0", "1", t0, last), ("gpu1", "1", t0, last),
                     ("gpu0", "2", now, None)}
    assert read_current_jobs(store, "node-0", now + 10) == {0: "2"}
    store.close()


def test_a_processor_on_victoriametrics_ends_an_old_job_at_its_last_seen_time(
        victoria: Server) -> None:
    """Through the Store's range reads (VictoriaMetrics keeps no ``newest_sample_ms``)."""
    from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
    from tests.store.helpers import cluster_name, force_flush

    store = VictoriaMetricsStore(f"http://{victoria.address}")
    c = cluster_name()
    t0 = round(time.time()) - 10 * DAY
    first = Processor(store)
    first.process([frame(t0 + 15 * k, gpu(0, job="1"), cluster=c) for k in range(5)])
    first.flush()
    force_flush(victoria.address)
    now = round(time.time())
    Processor(store).process([frame(now + k, gpu(0), cluster=c) for k in range(3)])
    force_flush(victoria.address)
    ends = [(e.value, e.ts) for e in store.events(t0 - 1, now + 10, kinds=["job_end"])
            if e.cluster == c]
    assert ends == [("1", t0 + 60)]
