"""The utilization page's jobs table keeps one row per (cluster, job): each cluster's
scheduler numbers its own jobs, so job 4000004 of one cluster is not job 4000004 of
another, and their GPU-hours and idle shares are not added up."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.dashboards import utilization
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore

HOUR = 1_763_798_400  # a whole hour


def _store(path: Path) -> SqliteStore:
    """Job 4000004 in a100c (3 GPUs, 2 hours, 60 s idle per GPU-hour) and in h100c (1 GPU,
    2 hours, 3,500 s idle per hour); GPUs without a job in both clusters."""
    rows = []
    for h in (HOUR, HOUR + 3600):
        for g in range(3):
            rows.append(EnergyRow(h, "a100c", "r1", "node-000", f"gpu{g}", "4000004", "u",
                                  "t", 1.4e6, 1e4, 3600.0, 60.0, 0.0, 0.0))
        rows.append(EnergyRow(h, "a100c", "r1", "node-000", "gpu3", "", "", "", 2e5, 2e5,
                              3600.0, 3600.0, 0.0, 0.0))
        rows.append(EnergyRow(h, "h100c", "r1", "node-000", "gpu0", "4000004", "v", "t",
                              3e5, 2.9e5, 3600.0, 3500.0, 0.0, 0.0))
        rows.append(EnergyRow(h, "h100c", "r1", "node-000", "gpu1", "", "", "", 2e5, 2e5,
                              1800.0, 1800.0, 0.0, 0.0))
    store = SqliteStore(path)
    store.write_energy(rows, [])
    return store


def _cells(table) -> list[list[str]]:
    body = table.children[1].children
    return [[td.children for td in tr.children] for tr in body]


def _want(store: SqliteStore, cluster: str | None = None) -> dict[tuple[str, str], str]:
    """Per (cluster, job), "GPU-hours, idle share" summed here from the store's rows."""
    acc: dict[tuple[str, str], list[float]] = {}
    for r in store.energy(HOUR, HOUR + 7200, cluster=cluster):
        if r.device.startswith("gpu"):
            a = acc.setdefault((r.cluster, r.job), [0.0, 0.0])
            a[0] += r.seconds
            a[1] += r.idle_s
    return {k: f"{s / 3600:,.1f} {i / s:.0%}" for k, (s, i) in acc.items()}


def test_the_same_job_id_in_two_clusters_is_two_rows(tmp_path: Path) -> None:
    store = _store(tmp_path / "s.db")
    _, jobs = utilization.ledger_totals(store, HOUR, HOUR + 7200, None, None)
    table = utilization.job_table(jobs)
    head = [th.children for th in table.children[0].children.children]
    assert head == ["Cluster", "Job", "GPU-hours", "Idle share"]
    got = {(c, "" if j == "(no job)" else j): f"{h} {s}" for c, j, h, s in _cells(table)}
    want = _want(store)
    assert got == want
    # the two 4000004 rows: 6.0 GPU-h 2% idle, and 2.0 GPU-h 97% idle, never 8.0 and 25%
    assert got[("a100c", "4000004")] == "6.0 2%" and got[("h100c", "4000004")] == "2.0 97%"
    store.close()


def test_one_clusters_and_one_nodes_jobs_keep_their_cluster(tmp_path: Path) -> None:
    store = _store(tmp_path / "s.db")
    _, jobs = utilization.ledger_totals(store, HOUR, HOUR + 7200, None, None, "h100c")
    got = {(c, j): f"{h} {s}" for c, j, h, s in _cells(utilization.job_table(jobs))}
    assert got == {(c, "(no job)" if j == "" else j): v
                   for (c, j), v in _want(store, "h100c").items()}
    # node-000 is in both clusters: its jobs are each cluster's own
    _, jobs = utilization.ledger_totals(store, HOUR, HOUR + 7200, "node-000", None)
    rows = {(c, j) for c, j, _, _ in _cells(utilization.job_table(jobs))}
    assert rows == {("a100c", "4000004"), ("h100c", "4000004"), ("a100c", "(no job)"),
                    ("h100c", "(no job)")}
    store.close()


@pytest.mark.browser
def test_the_page_shows_each_clusters_job(dash_duo, tmp_path: Path) -> None:
    from dash.testing.wait import until

    from fleetwatch.dashboards import create_app
    _store(tmp_path / "s.db").close()
    store = SqliteStore(tmp_path / "s.db", read_only=True)
    dash_duo.start_server(create_app(store, clock=lambda: HOUR + 7000.0))
    dash_duo.driver.get(dash_duo.server_url + "/utilization?range=6h")
    dash_duo.wait_for_element("#util-job-table tr.job-row", timeout=15)
    rows = lambda: dash_duo.driver.execute_script(  # noqa: E731
        "return Array.from(document.querySelectorAll('#util-job-table tr.job-row'))"
        ".map(r => Array.from(r.cells).map(c => c.textContent).join(' '));")
    until(lambda: len(rows()) == 4, timeout=10)
    assert "a100c 4000004 6.0 2%" in rows() and "h100c 4000004 2.0 97%" in rows()
    assert dash_duo.get_logs() == []
