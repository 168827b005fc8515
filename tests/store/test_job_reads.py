"""The job page's reads on every store backend: a job found by its events, its GPUs' series
kept to the time each held it, and the alerts on them (``dashboards.job_data``)."""

from __future__ import annotations

import time

from fleetwatch.dashboards.job_data import find_jobs, gpu_stats, read_job
from fleetwatch.pipeline.store.base import Alert, Event
from tests.store.backends import Backend
from tests.store.helpers import cluster_name, frames, minute_ago

TICKS = 180


def test_a_job_reads_back_the_same_from_every_backend(backend: Backend) -> None:
    cluster, t0 = cluster_name(), minute_ago(30)
    t = t0 / 1000
    job = f"job-{cluster}"
    store = backend.store
    store.write(frames(cluster, t0, TICKS))
    # node-0's two GPUs hold it from 30 s to 150 s; node-1's GPU 0 from 30 s on (running).
    store.write_events(
        [Event(t + 30, "job_start", cluster, "rack-0", n, f"gpu{g}", value=job)
         for n, g in (("node-0", 0), ("node-0", 1), ("node-1", 0))]
        + [Event(t + 150, "job_end", cluster, "rack-0", "node-0", f"gpu{g}", value=job)
           for g in (0, 1)]
        + [Event(t + 10, "job_start", cluster, "rack-0", "node-1", "gpu1", value="other")])
    during = Alert(f"a/{cluster}", "gpu_temp_high", "critical", cluster, "rack-0", "node-0",
                   "gpu1", "firing", t + 60, t + 90, 88.0, "GPU 1 on node-0 at 88 °C",
                   fired_ts=t + 90)
    before = Alert(f"b/{cluster}", "gpu_temp_high", "critical", cluster, "rack-0", "node-0",
                   "gpu1", "resolved", t + 1, t + 20, 88.0, "GPU 1 on node-0 at 88 °C",
                   fired_ts=t + 5, resolved_ts=t + 20)
    store.write_alerts([during, before])
    backend.settle()
    now = time.time()

    (found,) = find_jobs(store, job, now, cluster=cluster)
    assert [(g.node, g.gpu, g.start_ts, g.end_ts) for g in found.gpus] == [
        ("node-0", 0, t + 30, t + 150), ("node-0", 1, t + 30, t + 150),
        ("node-1", 0, t + 30, None)]
    assert found.running and find_jobs(store, job, now, cluster="elsewhere") == []

    view = read_job(store, found, found.start_ts, now, now)
    power = view.series["gpu_power_w"]
    assert sorted(power) == [("node-0", 0), ("node-0", 1), ("node-1", 0)]
    # Each line only while its GPU held the job: node-0's from tick 30 to tick 150.
    assert [ts for ts, _ in power[("node-0", 0)]][0] == t0 + 30_000
    assert [ts for ts, _ in power[("node-0", 0)]][-1] == t0 + 150_000
    assert len(power[("node-0", 0)]) == 121
    assert [ts for ts, _ in power[("node-1", 0)]][-1] == t0 + (TICKS - 1) * 1000
    # No SM activity in these frames, nor utilization: the chart says so, not a 0 line.
    assert view.series["gpu_sm_active_ratio"] == {}
    assert [a.id for a in view.alerts] == [during.id]
    medians, rows = gpu_stats(view.series, [(g.node, g.gpu) for g in found.gpus])
    # node-0's GPUs held it over ticks 30-150 (power 100 + tick: median 190), node-1's
    # GPU 0 over ticks 30-179 (median 204.5): furthest off the job's median, first.
    assert (rows[0].node, rows[0].gpu) == ("node-1", 0)
    assert rows[0].medians["gpu_power_w"] == 204.5
    assert medians["gpu_power_w"] == 190.25
