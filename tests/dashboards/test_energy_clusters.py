"""The energy page's top jobs and users where clusters have their own grid and PUE
(carbon.clusters): each cluster's part priced with its own, as ``fleetwatch report`` does,
jobs per cluster (Slurm ids restart in each), users across clusters."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from fleetwatch import report
from fleetwatch.carbon import build_model
from fleetwatch.dashboards import energy, energy_data, energy_figures
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.fakes import NOW

H = int(NOW) - int(NOW) % 3600 - 7200


def _model():  # c-west: the global grid (400 g, PUE 1.2); c-east its own (50 g, PUE 1.5)
    east = build_model("FRA", 50.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")
    return dataclasses.replace(build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0.10,
                                           "USD"), clusters={"c-east": east})


def _rows() -> list[EnergyRow]:
    def row(hour: int, c: str, node: str, gpu: int, job: str, user: str, kwh: float
            ) -> EnergyRow:
        return EnergyRow(hour, c, "r1", node, f"gpu{gpu}", job, user, "t", kwh * 3.6e6,
                         0.0, 3600.0, 0.0, 0.0, 0.0)

    return [row(H, "c-east", "node001", 0, "777", "alice", 3.0),
            row(H + 3600, "c-east", "node001", 0, "777", "alice", 3.0),
            row(H, "c-west", "node001", 0, "777", "alice", 2.0),
            row(H + 3600, "c-west", "node002", 1, "778", "bob", 1.0)]


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(tmp_path / "store.db")
    s.write_energy(_rows(), [])
    return s


def _page(v: energy_data.EnergyView) -> tuple[dict, dict]:
    return ({(j.cluster, j.name): (pytest.approx(j.kwh), pytest.approx(j.co2e_kg))
             for j in v.jobs},
            {u.name: (pytest.approx(u.kwh), pytest.approx(u.co2e_kg)) for u in v.users})


def _report(rows: list[EnergyRow]) -> tuple[dict, dict]:
    r = report.build(rows, _model(), H, H + 7200, now=NOW)
    return ({(x.cluster, x.name): (x.it_kwh, x.co2e_kg) for x in r.lines["job"]},
            {x.name: (x.it_kwh, x.co2e_kg) for x in r.lines["user"]})


@pytest.mark.parametrize("rolled_up", [False, True])
def test_top_jobs_and_users_agree_with_the_report(store: SqliteStore, rolled_up: bool) -> None:
    if rolled_up:  # hours closed and summed into the store's totals answer the same
        assert store.roll_up_energy(H + 7200) == 2
    v = energy_data.read_energy(store, _model(), H, H + 7200, NOW)
    jobs, users = _page(v)
    assert (jobs, users) == _report(_rows())
    # Job 777 of c-east and of c-west: two lines, each at its cluster's grid and PUE.
    assert jobs["c-east", "777"] == (6.0, 6.0 * 1.5 * 0.05)
    assert jobs["c-west", "777"] == (2.0, 2.0 * 1.2 * 0.4)
    # alice ran in both: one line, each part priced with its cluster's.
    assert users["alice"] == (8.0, 6.0 * 1.5 * 0.05 + 2.0 * 1.2 * 0.4)
    # The chart names each job's cluster, else one bar would stand for both 777s.
    bars = energy_figures.top_shares(v.jobs, "job", with_cluster=True).data[0]
    assert sorted(bars.y) == ["777 (c-east)", "777 (c-west)", "778 (c-west)"]


def test_one_clusters_top_jobs_take_its_grid(store: SqliteStore) -> None:
    v = energy_data.read_energy(store, _model(), H, H + 7200, NOW, cluster="c-east")
    east = [r for r in _rows() if r.cluster == "c-east"]
    assert _page(v) == _report(east)
    assert [(j.name, j.co2e_kg) for j in v.jobs] == [("777", pytest.approx(6.0 * 0.075))]
    bars = energy_figures.top_shares(v.jobs, "job").data[0]
    assert list(bars.y) == ["777"]


def test_hours_rolled_up_by_an_earlier_release_answer_per_cluster(tmp_path: Path) -> None:
    """A store whose hours were rolled up before the totals per cluster existed: read from
    its rows meanwhile, and rolled up again once opened for writing."""
    path = tmp_path / "store.db"
    s = SqliteStore(path)
    s.write_energy(_rows(), [])
    s.roll_up_energy(H + 7200)
    s.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM energy_agg WHERE kind LIKE '% per cluster'")
    again = SqliteStore(path)
    v = energy_data.read_energy(again, _model(), H, H + 7200, NOW)
    assert _page(v) == _report(_rows())
    assert again.roll_up_energy(H + 7200) == 2
    with sqlite3.connect(path) as conn:
        kinds = {k for (k,) in conn.execute("SELECT DISTINCT kind FROM energy_agg")}
    assert {"job per cluster", "user per cluster"} <= kinds
    again.close()


def test_the_method_note_no_longer_says_the_top_lists_take_the_global_grid() -> None:
    note = energy.method_note(_model())
    assert "Cluster c-east: grid intensity 50 gCO2e/kWh" in note
    assert "global grid" not in note
