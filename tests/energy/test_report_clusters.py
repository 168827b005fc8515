"""Several clusters in one store: same-named nodes and job ids stay apart in the report."""

from __future__ import annotations

import csv
import re

import pytest

from fleetwatch.carbon import J_PER_KWH, build_model
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import build
from fleetwatch.report_files import CSV_FIELDS, write_report
from fleetwatch.report_month import month_span

MAY = month_span("2022-05")
H = MAY[0] + 86400


def row(cluster: str, node: str, job: str, kwh: float = 1.0) -> EnergyRow:
    return EnergyRow(H, cluster, "r1", node, "gpu0", job, "u", "t", kwh * J_PER_KWH, 0.0,
                     3600.0, 0.0, 0.0, 0.0)


def model():
    return build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")


ROWS = [row("c-east", "node001", "777", 1.0), row("c-west", "node001", "777", 2.0),
        row("c-east", "node002", "", 4.0)]


def test_same_named_nodes_and_jobs_of_two_clusters_are_two_rows():
    r = build(ROWS, model(), *MAY, "2022-05")
    nodes = {(x.cluster, x.name): x.it_kwh for x in r.lines["node"]}
    assert nodes == {("c-east", "node001"): pytest.approx(1.0),
                     ("c-west", "node001"): pytest.approx(2.0),
                     ("c-east", "node002"): pytest.approx(4.0)}
    jobs = {(x.cluster, x.name): x.it_kwh for x in r.lines["job"]}
    assert jobs == {("c-east", "777"): pytest.approx(1.0), ("c-west", "777"): pytest.approx(2.0),
                    ("c-east", "(no job)"): pytest.approx(4.0)}
    # A user is one person across clusters: one row, no cluster.
    assert [(x.cluster, x.name) for x in r.lines["user"]] == [("", "u")]
    assert {x.name: x.cluster for x in r.lines["cluster"]} == {"c-east": "c-east",
                                                               "c-west": "c-west"}


def test_the_csv_and_html_name_the_cluster_in_a_column_added_last(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    store.write_energy(ROWS, [])
    paths = write_report(store, model(), "2022-05", tmp_path / "out", now=MAY[1] + 10)
    # Columns added later go after it, so it keeps its place (the 17th).
    assert CSV_FIELDS[:2] == ("kind", "name") and CSV_FIELDS[15:17] == ("currency", "cluster")
    with paths["csv"].open() as f:
        rows = list(csv.DictReader(f))
    nodes = sorted((r["cluster"], r["name"], float(r["it_kwh"])) for r in rows
                   if r["kind"] == "node")
    assert nodes == [("c-east", "node001", 1.0), ("c-east", "node002", 4.0),
                     ("c-west", "node001", 2.0)]
    page = paths["html"].read_text()
    node_table = page.split("By node")[1].split("</table>")[0]
    assert node_table.count("<th>cluster</th>") == 1
    assert re.search(r"<td>node001</td>(<td>[^<]*</td>){9}<td>c-west</td></tr>", node_table)


def test_cli_report_of_one_cluster_reads_its_rows_into_files_named_after_it(tmp_path, capsys):
    import json

    from fleetwatch.cli import main

    db = tmp_path / "s.db"
    SqliteStore(db).write_energy(ROWS, [])
    out = tmp_path / "out"
    assert main(["report", "--month", "2022-05", "--store", str(db), "--out", str(out),
                 "--cluster", "c-west"]) == 0
    assert "2022-05 cluster c-west: " in capsys.readouterr().out
    with (out / "fleetwatch-energy-2022-05-c-west.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {(r["kind"], r["name"], r["cluster"]) for r in rows if r["kind"] in ("node", "job",
            "cluster")} == {("node", "node001", "c-west"), ("job", "777", "c-west"),
                            ("cluster", "c-west", "c-west")}
    summary = json.loads((out / "fleetwatch-energy-2022-05-c-west.json").read_text())
    assert summary["it_kwh"] == pytest.approx(2.0) and summary["cluster"] == "c-west"
    assert "cluster c-west" in (out / "fleetwatch-energy-2022-05-c-west.html").read_text()
    assert main(["report", "--month", "2022-05", "--store", str(db), "--out", str(out),
                 "--cluster", "c-nowhere"]) == 1
    assert "no cluster 'c-nowhere' in the ledger" in capsys.readouterr().err


def test_an_unknown_cluster_is_named_with_the_clusters_the_ledger_has_that_month(
        tmp_path, capsys):
    from fleetwatch.cli import main

    db = tmp_path / "s.db"
    SqliteStore(db).write_energy(ROWS, [])
    out = tmp_path / "out"
    assert main(["report", "--month", "2022-05", "--store", str(db), "--out", str(out),
                 "--cluster", "prod"]) == 1
    err = capsys.readouterr().err
    assert "no cluster 'prod' in the ledger for 2022-05" in err
    assert "clusters it has for 2022-05: c-east, c-west" in err
    assert not out.exists()


def test_an_empty_cluster_means_every_cluster_in_report_as_in_alerts(tmp_path, capsys):
    from fleetwatch.cli import main

    db = tmp_path / "s.db"
    SqliteStore(db).write_energy(ROWS, [])
    out = tmp_path / "out"
    assert main(["report", "--month", "2022-05", "--store", str(db), "--out", str(out),
                 "--cluster", ""]) == 0
    with (out / "fleetwatch-energy-2022-05.csv").open() as f:
        clusters = {r["cluster"] for r in csv.DictReader(f) if r["kind"] == "node"}
    assert clusters == {"c-east", "c-west"}
    capsys.readouterr()
    assert main(["alerts", "--store", str(db), "--cluster", ""]) == 0
    assert "of cluster" not in capsys.readouterr().out
