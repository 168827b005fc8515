"""On InfluxDB, jobs add no series: an event's value and a ledger row's job, user and
team are fields, not tags (InfluxDB's schema guidance: values of unbounded
cardinality go in fields). Checked against a real influxd 1.6.7: series before and
after many jobs, what is read back (events, the ledger by job), rows written by an
earlier release (owner as tags) still read, and two jobs starting on one GPU in
the same millisecond kept apart.
"""

from __future__ import annotations

import time

from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.energy_influxql import owner_offset_ms, row_line
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.ledger import BUCKET_S, EnergyRow
from fleetwatch.pipeline.store.lprecords import event_line, value_offset_ns
from tests.servers import Server
from tests.store.conftest import DATABASE
from tests.store.helpers import cluster_name
from tests.store.test_influx_limits import influxql, write_raw


def series(address: str, cluster: str, measurement: str) -> int:
    got = influxql(address, f"SHOW SERIES FROM \"{measurement}\" WHERE cluster = '{cluster}'",
                   DATABASE)["results"][0].get("series", [])
    return len(got[0]["values"]) if got else 0


def job_events(cluster: str, t0: float, jobs: int) -> list[Event]:
    out = []
    for j in range(jobs):
        for kind, dt in (("job_start", 0.0), ("job_end", 3000.0)):
            out.append(Event(t0 + j * 3600 + dt, kind, cluster, "r1", "n1", "gpu0",
                             value=f"job-{j}"))
    return out


def row(cluster: str, bucket: int, job: str, energy_j: float) -> EnergyRow:
    return EnergyRow(bucket, cluster, "r1", "n1", "gpu0", job, f"u-{job}", "team",
                     energy_j, 0.0, 3600.0, 0.0, 0.0, 0.0)


def test_lines_carry_job_values_as_fields() -> None:
    e = Event(1_700_000_000.5, "job_start", "c", "r", "n", "gpu0", value="job 7")
    line = event_line(e, text=True, v1=True)
    assert ",value=" not in line.split(" ")[0] and 'value="job 7"' in line
    stamp = int(line.rsplit(" ", 1)[1])  # ns, within the event's own millisecond
    assert stamp // 1_000_000 == 1_700_000_000_500
    assert stamp % 1_000_000 == value_offset_ns("job 7") != 0
    assert ",value=job\\ 7" in event_line(e, text=False)  # VictoriaMetrics: numbers only
    r = row("c", 1_700_000_000 // BUCKET_S * BUCKET_S, "job 7", 1.0)
    line = row_line(r)
    assert "job=" not in line.split(" ")[0] and 'job="job 7"' in line
    assert 0 < owner_offset_ms("job 7", "u-job 7", "team") < BUCKET_S * 1000


def test_jobs_add_no_series_and_read_back_whole(influxdb: Server) -> None:
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=DATABASE, api="v1")
    cluster = cluster_name()
    t0 = (time.time() // BUCKET_S - 48) * BUCKET_S
    store.write_events(job_events(cluster, t0, 24))
    # Two jobs starting on one GPU in the same ms stay two events.
    same = [Event(t0 + 10, "job_start", cluster, "r1", "n1", "gpu0", value=v) for v in "ab"]
    store.write_events(same)
    store.write_energy([row(cluster, int(t0) + h * BUCKET_S, f"job-{h}", 100.0 + h)
                        for h in range(24)]
                       + [row(cluster, int(t0), "shared", 5.0)], [])
    assert series(influxdb.address, cluster, "fleetwatch_event") == 2  # start, end
    assert series(influxdb.address, cluster, "fleetwatch_energy") == 1  # the GPU
    events = [e for e in store.events(t0, t0 + 30 * 3600, node="n1")
              if e.cluster == cluster]
    assert len(events) == 48 + 2
    assert [e.value for e in events if e.ts == t0 + 10] == ["a", "b"]
    assert {e.value for e in events} == {f"job-{j}" for j in range(24)} | {"a", "b"}
    rows = [r for r in store.energy(t0, t0 + 24 * BUCKET_S) if r.cluster == cluster]
    assert sorted((r.bucket_ts, r.job, r.user, r.energy_j) for r in rows)[:2] == [
        (int(t0), "job-0", "u-job-0", 100.0), (int(t0), "shared", "u-shared", 5.0)]
    assert len(rows) == 25
    # A window ending inside an hour holds that hour's rows (stamped within it).
    assert len([r for r in store.energy(t0, t0 + 60) if r.cluster == cluster]) == 2
    totals = {t.name: t.energy_j for t in store.energy_totals(t0, t0 + 24 * BUCKET_S, "job")}
    assert totals["job-3"] == 103.0 and totals["shared"] == 5.0
    store.close()


def test_rows_written_with_tags_by_an_earlier_release_are_still_read(
        influxdb: Server) -> None:
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=DATABASE, api="v1")
    cluster = cluster_name()
    bucket = int((time.time() // BUCKET_S - 5) * BUCKET_S)
    ms = bucket * 1000
    write_raw(influxdb.address, DATABASE, "\n".join([
        f"fleetwatch_energy,cluster={cluster},device=gpu0,job=old-job,node=n1,rack=r1,"
        f"team=ml,user=alice energy_j=7.0,idle_j=0.0,seconds=60.0,idle_s=0.0,missing_s=0.0,"
        f"over_tdp_s=0.0 {ms}",
        f"fleetwatch_energy,cluster={cluster},device=gpu0,job=both,node=n1,rack=r1,"
        f"team=t,user=u energy_j=1.0,idle_j=0.0,seconds=60.0,idle_s=0.0,missing_s=0.0,"
        f"over_tdp_s=0.0 {ms}",
        f"fleetwatch_event,cluster={cluster},device=gpu0,kind=job_start,node=n1,rack=r1,"
        f"value=old-job ts={bucket + 1}.0 {ms + 1000}"]) + "\n")
    # The same hour of job "both" rewritten by this release: its newer total wins.
    store.write_energy([EnergyRow(bucket, cluster, "r1", "n1", "gpu0", "both", "u", "t",
                                  2.0, 0.0, 120.0, 0.0, 0.0, 0.0)], [])
    rows = sorted((r.job, r.user, r.team, r.energy_j)
                  for r in store.energy(bucket, bucket + BUCKET_S) if r.cluster == cluster)
    # Old tags and new fields side by side: each row keeps its job, user and team.
    assert rows == [("both", "u", "t", 2.0), ("old-job", "alice", "ml", 7.0)]
    (old,) = [e for e in store.events(bucket, bucket + 10) if e.cluster == cluster]
    assert (old.kind, old.value) == ("job_start", "old-job")
    store.close()
