"""The job page's logic without a browser: a job found by its events, its GPUs' lines kept to
the job, each GPU against the job's median, its alerts and energy, and the links to it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetwatch.carbon import CarbonModel
from fleetwatch.dashboards import alert_tables, components, job, job_data, job_figures
from fleetwatch.pipeline.links import alert_jobs
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.fakes import NOW, alert, key
from tests.dashboards.test_data import text_of

DAY = 86_400.0


def ev(kind: str, ts: float, job_id: str, node: str = "n1", gpu: int = 0,
       cluster: str = "sim") -> Event:
    return Event(ts, kind, cluster, "r0", node, f"gpu{gpu}", value=job_id)


def test_a_job_is_its_gpus_spans_from_first_start_to_last_end() -> None:
    events = [ev("job_start", NOW - 900, "42", gpu=0), ev("job_start", NOW - 900, "42", gpu=1),
              ev("job_start", NOW - 600, "42", gpu=0),        # a processor that restarted
              ev("job_end", NOW - 300, "42", gpu=1), ev("job_start", NOW - 300, "43", gpu=1),
              ev("job_end", NOW - 100, "42", node="n2"),      # its start is older than read
              ev("job_start", NOW - 500, "42", cluster="other")]
    other, here = job_data.job_spans(events, "42", NOW - DAY)  # clusters in name order
    assert (other.cluster, here.cluster) == ("other", "sim")
    assert [(g.node, g.gpu, g.start_ts, g.end_ts, g.start_known) for g in here.gpus] == [
        ("n1", 0, NOW - 900, None, True), ("n1", 1, NOW - 900, NOW - 300, True),
        ("n2", 0, NOW - DAY, NOW - 100, False)]
    assert here.running and here.nodes == ("n1", "n2") and here.start_ts == NOW - DAY
    ended = job_data.job_spans([events[0], ev("job_end", NOW - 50, "42")], "42", NOW - DAY)[0]
    assert not ended.running and ended.end_ts == NOW - 50
    assert job_data.job_spans(events, "nope", NOW - DAY) == []


def test_finding_a_job_reads_back_to_its_first_start(
        tmp_path: Path) -> None:
    """Started three days ago, ended an hour ago: the last day holds only its end, and its
    node's older events give its start."""
    store = SqliteStore(tmp_path / "s.db")
    store.write_events([ev("job_start", NOW - 3 * DAY, "7"), ev("job_end", NOW - 3600, "7"),
                        ev("job_start", NOW - 600, "7", cluster="b"),
                        # Running for 20 days; a processor restarted an hour ago: its start
                        # read in the last day is no start.
                        ev("job_start", NOW - 20 * DAY, "9", node="n3"),
                        ev("job_start", NOW - 3600, "9", node="n3"),
                        ev("job_start", NOW - 10 * DAY, "10", node="n4")])
    found = job_data.find_jobs(store, "7", NOW)
    assert [(j.cluster, j.start_ts, j.end_ts) for j in found] == [
        ("b", NOW - 600, None), ("sim", NOW - 3 * DAY, NOW - 3600)]
    (running,) = job_data.find_jobs(store, "9", NOW)
    assert running.start_ts == NOW - 20 * DAY and running.running
    (quiet,) = job_data.find_jobs(store, "10", NOW)  # no event in the last week
    assert quiet.start_ts == NOW - 10 * DAY and quiet.gpus[0].start_known
    assert [j.cluster for j in job_data.find_jobs(store, "7", NOW, cluster="sim")] == ["sim"]
    assert job_data.find_jobs(store, "8", NOW) == []
    store.close()


def test_a_gpus_line_is_kept_to_the_time_it_held_the_job() -> None:
    (j,) = job_data.job_spans([ev("job_start", NOW - 600, "42", gpu=0),
                               ev("job_end", NOW - 300, "42", gpu=0),
                               ev("job_start", NOW - 600, "42", gpu=1)], "42", NOW - DAY)
    pts = [(key("gpu_power_w", "n1", g), int((NOW - age) * 1000), float(age))
           for g in (0, 1, 2) for age in (700, 500, 200)]
    lines = job_data.clip(pts, j, "n1")
    assert lines == {("n1", 0): [(int((NOW - 500) * 1000), 500.0)],
                     ("n1", 1): [(int((NOW - 500) * 1000), 500.0),
                                 (int((NOW - 200) * 1000), 200.0)]}


def test_the_gpu_furthest_off_the_jobs_median_comes_first() -> None:
    clock = {("n1", g): [(0, 1980.0), (1, 1980.0)] for g in range(4)}
    clock[("n1", 2)] = [(0, 1400.0), (1, 1500.0)]              # the straggler
    temp = {("n1", g): [(0, 60.0)] for g in range(4)}
    temp[("n1", 1)] = [(0, 66.0)]                              # warm, not as far off
    medians, rows = job_data.gpu_stats({"gpu_sm_clock_mhz": clock, "gpu_temp_c": temp},
                                       [("n1", g) for g in range(4)])
    assert medians == {"gpu_sm_clock_mhz": 1980.0, "gpu_power_w": None, "gpu_temp_c": 60.0}
    assert [(r.node, r.gpu) for r in rows] == [("n1", 2), ("n1", 1), ("n1", 0), ("n1", 3)]
    assert rows[0].medians["gpu_sm_clock_mhz"] == 1450.0
    assert round(rows[0].off["gpu_sm_clock_mhz"], 3) == round(1450 / 1980 - 1, 3)
    assert rows[0].off["gpu_power_w"] is None and rows[1].worst == 0.1
    table = job_figures.gpu_table(job_data.Job("42", "sim", ()), medians, rows, None)
    first = text_of(table).split("job median")[1]
    assert first.index("n1 · GPU 2") < first.index("n1 · GPU 1") and "(-27%)" in first


def test_the_jobs_alerts_are_those_on_its_gpus_while_they_held_it() -> None:
    (j,) = job_data.job_spans([ev("job_start", NOW - 1200, "42", node="node-a", gpu=3),
                               ev("job_end", NOW - 100, "42", node="node-a", gpu=3)],
                              "42", NOW - DAY)
    during = alert("node-a", 3, started_ago_s=600)
    before = dataclasses.replace(alert("node-a", 3, "resolved", started_ago_s=3000),
                                 id="before", resolved_ts=NOW - 2000)
    other_gpu = alert("node-a", 4, started_ago_s=600)
    other_cluster = dataclasses.replace(during, id="x", cluster="elsewhere")
    node_alert = alert("node-a", None, started_ago_s=300, rule="job_hung")
    got = job_data.job_alerts([during, before, other_gpu, other_cluster, node_alert], j)
    assert [a.id for a in got] == [during.id, node_alert.id]


def test_an_alert_table_links_the_job_its_message_names() -> None:
    lagging = dataclasses.replace(alert("n1", 3, rule="gpu_straggler"),
                                  message="GPU 3 on n1 (job 42) lags its job peers: 61%")
    hung = dataclasses.replace(alert("n1", None, rule="job_hung"), id="h",
                               message="job 17/a hung on n1: its 8 GPUs have a kernel ...")
    plain = alert("n2", 1)
    assert [alert_jobs(a) for a in (lagging, hung, plain)] == [("42",), ("17/a",), ()]
    table = alert_tables.alert_table([lagging, hung, plain], NOW, "t")
    hrefs = [c.href for c in _walk(table) if getattr(c, "className", "") == "job-link"]
    assert hrefs == ["/job/42?cluster=sim", "/job/17%2Fa?cluster=sim"]


def test_an_alert_on_a_shared_gpu_links_each_of_its_jobs() -> None:
    xid = dataclasses.replace(alert("n1", 2, rule="gpu_xid_critical"),
                              message="GPU 2 on n1 (job 111,222): XID 79 (fallen off the bus)")
    table = alert_tables.alert_table([xid], NOW, "t")
    links = [(c.children, c.href) for c in _walk(table)
             if getattr(c, "className", "") == "job-link"]
    assert links == [("job 111", "/job/111?cluster=sim"), ("job 222", "/job/222?cluster=sim")]


def test_a_node_named_like_a_job_names_no_job() -> None:
    a = dataclasses.replace(alert("evil (job 999)", 3, rule="gpu_straggler"),
                            message="GPU 3 on evil (job 999) (job 42) lags its job peers")
    assert alert_jobs(a) == ("42",)
    b = dataclasses.replace(a, message="GPU 3 on evil (job 999) lags its job peers")
    assert alert_jobs(b) == ()


def _walk(c: object) -> list:
    out = [c]
    kids = getattr(c, "children", None)
    for k in kids if isinstance(kids, list | tuple) else [kids] if kids is not None else []:
        if not isinstance(k, str):
            out += _walk(k)
    return out


def row(hour: int, device: str, job_id: str, energy_j: float) -> EnergyRow:
    return EnergyRow(hour, "sim", "r0", "n1", device, job_id, "u", "t", energy_j, 0.0,
                     3600.0 if device.startswith("gpu") else 0.0, 0.0, 0.0, 0.0)


def test_a_jobs_energy_is_its_ledger_rows_priced_hour_by_hour() -> None:
    model = CarbonModel(400.0, "test", 1.5, "test")  # 400 g/kWh x PUE 1.5: 0.6 kg per kWh
    rows = [row(7200, "gpu0", "42", 3.6e6), row(7200, "cpu", "42", 1.8e6),
            row(10800, "gpu0", "42", 3.6e6), row(7200, "gpu1", "43", 9e9)]
    share = job_data.energy_share(rows, "42", model)
    assert share is not None and share.kwh == 2.5 and share.gpu_hours == 2.0
    assert round(share.co2e_kg, 9) == 1.5
    assert job_data.energy_share(rows, "44", model) is None


def test_a_nodes_gpus_current_jobs_link_to_their_pages() -> None:
    events = [ev("job_start", NOW - 900, "41", gpu=0), ev("job_end", NOW - 300, "41", gpu=0),
              ev("job_start", NOW - 300, "42", gpu=0), ev("job_start", NOW - 900, "42", gpu=1),
              ev("job_start", NOW - 900, "9", gpu=2), ev("job_end", NOW - 10, "9", gpu=2)]
    jobs = job_data.current_jobs(reversed(events))
    assert jobs == {0: "42", 1: "42"}
    line = job.jobs_line(jobs)
    assert text_of(line) == "Jobs now:   job 42  (GPUs 0, 1)"
    assert [c.href for c in line if hasattr(c, "href")] == ["/job/42"]
    assert text_of(job.jobs_line({})) == "No job on its GPUs now"


def test_the_range_is_the_jobs_span_capped_or_a_range_ending_where_the_job_ended() -> None:
    (long,) = job_data.job_spans([ev("job_start", NOW - 20 * DAY, "1"),
                                  ev("job_end", NOW - DAY, "1")], "1", NOW - 31 * DAY)
    assert job.window(long, job.JOB_RANGE, NOW) == (NOW - 8 * DAY, NOW - DAY)
    assert job.range_label(long, job.JOB_RANGE, NOW) == "the job's last 7 d"
    assert job.window(long, "6h", NOW) == (NOW - DAY - 6 * 3600, NOW - DAY)
    (short,) = job_data.job_spans([ev("job_start", NOW - 600, "2")], "2", NOW - DAY)
    assert job.window(short, job.JOB_RANGE, NOW) == (NOW - 600, NOW)
    assert job.range_label(short, job.JOB_RANGE, NOW) == "the job's span"
    assert job.window(short, "6h", NOW) == (NOW - 600, NOW)  # nothing before the job
    assert job.query_of("?cluster=b&range=6h") == ("b", "6h")
    assert job.query_of("?range=bogus") == (None, job.JOB_RANGE)


def test_an_unknown_job_says_so_and_a_job_in_two_clusters_lists_both() -> None:
    text = job.not_found_text("nope", None, [])
    assert text.startswith("No job nope in the last 31 days of job events")
    found = job_data.job_spans([ev("job_start", NOW - 600, "5", cluster="a"),
                                ev("job_start", NOW - 600, "5", cluster="b")], "5", NOW - DAY)
    links = [c.href for c in _walk(job.choices("5", found, job.JOB_RANGE))
             if hasattr(c, "href")]
    assert links == ["/job/5?cluster=a", "/job/5?cluster=b"]
    assert "it ran in a, b" in job.not_found_text("5", "c", found)


def test_gpus_without_sm_activity_draw_utilization_and_say_so() -> None:
    """Before Hopper NVML has no GPM: the SM activity chart draws utilization, never 0."""
    from tests.dashboards.fakes import FakeStore, point

    (j,) = job_data.job_spans([ev("job_start", NOW - 600, "42", node="node-a", gpu=g)
                               for g in (0, 1)], "42", NOW - DAY)
    store = FakeStore(points=[point(m, "node-a", g, v, age_s=age)
                              for m, v in (("gpu_util_pct", 97.0), ("gpu_power_w", 400.0))
                              for g in (0, 1) for age in (300, 60)])
    view = job_data.read_job(store, j, NOW - 600, NOW, NOW)  # type: ignore[arg-type]
    assert view.drawn["gpu_sm_active_ratio"] == "gpu_util_pct"
    assert sorted(view.series["gpu_sm_active_ratio"]) == [("node-a", 0), ("node-a", 1)]
    assert view.series["gpu_sm_clock_mhz"] == {} and view.energy is None
    hints = job._drawn(view, job.JOB_RANGE, NOW)[-4:]
    assert hints[0] == "% · the job's span · UTC · no SM activity (GPM): utilization"


def test_a_job_sharing_a_gpu_is_found_and_linked_on_its_own() -> None:
    events = [ev("job_start", NOW - 900, "4001"), ev("job_start", NOW - 600, "4002"),
              ev("job_end", NOW - 300, "4001"),
              # as stored before events were per job: the comma-joined value of the GPU
              ev("job_start", NOW - 900, "4001,4002,user:root", gpu=3),
              ev("job_end", NOW - 100, "4001,4002,user:root", gpu=3)]
    (found,) = job_data.job_spans(events, "4001", NOW - DAY)
    assert [(g.gpu, g.start_ts, g.end_ts) for g in found.gpus] == [
        (0, NOW - 900, NOW - 300), (3, NOW - 900, NOW - 100)]
    assert job_data.job_spans(events, "400", NOW - DAY) == []
    now = job_data.current_jobs(events[:3] + [ev("job_start", NOW, "7,8", gpu=1)])
    assert now == {0: "4002", 1: "7,8"}
    line = job.jobs_line(now)
    assert [c.href for c in line if hasattr(c, "href")] == ["/job/4002", "/job/7", "/job/8"]


def test_a_job_on_a_shared_gpu_is_found_in_the_store(tmp_path: Path) -> None:
    from fleetwatch.frame import Frame, GpuReading
    from fleetwatch.pipeline.events import EventTracker

    def frame(ts: float, job: str | None) -> Frame:
        return Frame("sim", "r0", "n1", ts, (GpuReading(3, "GPU-x", "H100", {}, job=job),))

    tracker = EventTracker()
    store = SqliteStore(tmp_path / "s.db")
    store.write_events(tracker.update([frame(NOW - 900, "4001,4002")]))
    assert job_data.read_current_jobs(store, "n1", NOW - 800) == {3: "4001,4002"}
    for ts, held in ((NOW - 600, "4002"), (NOW - 300, None)):
        store.write_events(tracker.update([frame(ts, held)]))
    (found,) = job_data.find_jobs(store, "4001", NOW)
    assert [(g.node, g.gpu, g.start_ts, g.end_ts) for g in found.gpus] == [
        ("n1", 3, NOW - 900, NOW - 600)]
    assert job_data.read_current_jobs(store, "n1", NOW) == {}
    store.close()


def test_a_short_jobs_energy_is_shown_in_wh() -> None:
    assert job.job_energy(0.03) == "30.0 Wh"
    assert job.job_energy(0.0004) == "0.400 Wh"
    assert job.job_energy(2.5) == "2.50 kWh"
    assert job.job_energy(1500) == "1.50 MWh"


def test_a_jobs_gpu_hours_read_as_the_report_csv_says_them() -> None:
    """One decimal, as the report's tables and the utilization page (the CSV's 180.533 is
    180.5, not 181); a short job's few GPU-minutes are not "0.0"; thousands as whole."""
    assert job.job_gpu_hours(180.533333) == "180.5"
    assert job.job_gpu_hours(999.94) == "999.9"
    assert job.job_gpu_hours(0.0333) == "0.0333"
    assert job.job_gpu_hours(0) == "0"
    assert job.job_gpu_hours(12345.6) == "12,346"


def test_the_energy_tile_shows_gpu_hours_with_one_decimal() -> None:
    share = job_data.Share("4000028", 50.0, 28.9, 180.533333, 0.1, 0.05, "sim")
    gpu = job_data.JobGpu("rack-00", "node-001", 0, NOW - 3600, None)
    view = job_data.JobView(job_data.Job("4000028", "sim", (gpu,)), NOW - 3600, NOW, {}, {},
                            (), share)
    (tile,) = [t for t in job.summary(view, NOW) if t.id == "job-energy-tile"]
    assert "180.5 GPU-hours" in text_of(tile)


def test_a_silent_node_shows_its_last_jobs_seen_not_jobs_now() -> None:
    jobs = {g: "4001901" for g in range(8)}
    fresh = job.jobs_line(jobs, seen_ms=int((NOW - 30) * 1000), now_s=NOW)
    assert text_of(fresh).startswith("Jobs now:")
    # The node's newest sample is 4 h old: its job is what it last said, not "now".
    quiet = job.jobs_line(jobs, seen_ms=int((NOW - 4 * 3600) * 1000), now_s=NOW)
    seen = components.stamp(NOW - 4 * 3600, NOW)
    assert text_of(quiet).startswith(f"No data since {seen} UTC · last job seen:"), quiet
    assert "job 4001901" in text_of(quiet) and "now" not in text_of(quiet)
    # No sample of it in the range at all.
    gone = job.jobs_line(jobs, seen_ms=None, now_s=NOW)
    assert text_of(gone).startswith("No data from it in this range · last job seen:"), gone
    assert text_of(job.jobs_line({}, seen_ms=None, now_s=NOW)) == "No job seen on its GPUs"


def test_the_newest_sample_of_a_node() -> None:
    from fleetwatch.dashboards.node import newest_ms
    assert newest_ms({"gpu_temp_c": {0: [(1, 50.0), (5, 51.0)], 1: [(7, 50.0)]},
                      "gpu_power_w": {0: []}}) == 7
    assert newest_ms({}) is None and newest_ms({"gpu_temp_c": {}}) is None


def test_the_energy_tile_says_the_share_of_the_jobs_gpu_time_without_energy_data() -> None:
    # 16 GPUs for 4 h, of which 1.5 GPU-hours have energy data: not "the whole job".
    share = job_data.Share("4000073", 0.596, 0.3, 1.5, 0.1, 0.05, "sim")
    gpu = job_data.JobGpu("rack-00", "node-001", 0, NOW - 4 * 3600, None)
    view = job_data.JobView(job_data.Job("4000073", "sim", (gpu,)), NOW - 3600, NOW, {}, {},
                            (), share, energy_missing_h=62.5)
    (tile,) = [t for t in job.summary(view, NOW) if t.id == "job-energy-tile"]
    said = text_of(tile)
    assert "the whole job" not in said, said
    assert "62.5 GPU-hours (98 %) of its GPU time without energy data" in said, said
    whole = dataclasses.replace(view, energy_missing_h=0.0)
    (tile,) = [t for t in job.summary(whole, NOW) if t.id == "job-energy-tile"]
    assert "the whole job" in text_of(tile)


def test_a_jobs_missing_gpu_hours_are_its_gpu_rows_missing_seconds() -> None:
    def row(device: str, job_id: str, missing_s: float) -> EnergyRow:
        return EnergyRow(0, "sim", "r0", "n1", device, job_id, "u", "t", 10.0, 0.0, 60.0,
                         0.0, missing_s, 0.0)
    rows = [row("gpu0", "7", 3600.0), row("gpu1", "7", 1800.0), row("cpu", "7", 3600.0),
            row("gpu2", "8", 3600.0)]
    assert job_data.missing_gpu_hours(rows, "7") == 1.5  # the CPU's and job 8's left out
