"""The monthly report's energy per rack: a row per (cluster, rack), each at its cluster's PUE,
in the CSV and the HTML, summing to the total as every breakdown does."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from fleetwatch.carbon import J_PER_KWH, build_model
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import build
from fleetwatch.report_files import write_report
from fleetwatch.report_month import month_span

MAY = month_span("2022-05")
H = MAY[0] + 86400


def row(cluster: str, rack: str, node: str, device: str, kwh: float, hour: int = H
        ) -> EnergyRow:
    return EnergyRow(hour, cluster, rack, node, device, "", "", "", kwh * J_PER_KWH, 0.0,
                     3600.0, 0.0, 0.0, 0.0)


ROWS = [row("east", "r1", "n1", "gpu0", 3.0), row("east", "r1", "n1", "cpu", 1.0),
        row("east", "r1", "n2", "rest", 0.5, H + 3600), row("east", "r2", "n3", "gpu0", 2.0),
        row("west", "r1", "n1", "gpu0", 7.0)]


def model():
    return dataclasses.replace(
        build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0.10, "USD"),
        clusters={"east": build_model("FRA", 50.0, "", "avg_CI", 1.5, "", "pue", 0.1, "USD")})


def test_a_rack_row_per_cluster_and_rack_at_its_clusters_pue():
    r = build(ROWS, model(), *MAY, "2022-05")
    racks = {(x.cluster, x.name): (x.it_kwh, x.facility_kwh) for x in r.lines["rack"]}
    assert racks == {("east", "r1"): pytest.approx((4.5, 4.5 * 1.5)),
                     ("east", "r2"): pytest.approx((2.0, 2.0 * 1.5)),
                     ("west", "r1"): pytest.approx((7.0, 7.0 * 1.2))}
    assert sum(x.it_kwh for x in r.lines["rack"]) == pytest.approx(r.total.it_kwh)
    assert [x.name for x in r.lines["rack"]][0] == "r1" and r.lines["rack"][0].cluster == "west"


def test_the_csv_and_html_have_the_rack_table(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    store.write_energy(ROWS, [])
    paths = write_report(store, model(), "2022-05", tmp_path / "out", now=MAY[1] + 10)
    with paths["csv"].open() as f:
        racks = sorted((r["cluster"], r["name"], float(r["it_kwh"]), float(r["facility_kwh"]))
                       for r in csv.DictReader(f) if r["kind"] == "rack")
    assert racks == [("east", "r1", 4.5, 6.75), ("east", "r2", 2.0, 3.0),
                     ("west", "r1", 7.0, pytest.approx(8.4))]
    page = paths["html"].read_text()
    table = page[page.index("<h3>By rack</h3>"):]
    table = table[:table.index("</table>")]
    assert table.count("<td>r1</td>") == 2 and "<td>r2</td>" in table
    assert "<td>west</td>" in table and "<td>east</td>" in table
