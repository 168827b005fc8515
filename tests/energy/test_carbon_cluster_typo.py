"""A misspelt ``[carbon.clusters.NAME]`` (c-esat for c-east) matches no cluster: the
cluster it meant is priced on ``[carbon]``. The CLI and the report warn of the table,
list the clusters that fell back to ``[carbon]``, and "Method and sources" does not name
the unused table's grid as if it priced anything."""

from __future__ import annotations

import json

from fleetwatch.cli import main
from fleetwatch.pipeline.store.sqlite import SqliteStore

from .test_carbon_clusters import row


def report(tmp_path, capsys, table: str) -> tuple[str, dict]:
    db = tmp_path / "s.db"
    if not db.exists():
        SqliteStore(db).write_energy([row("c-east"), row("c-west")], [])
    conf = tmp_path / f"{table}.toml"
    conf.write_text("[carbon]\nintensity_g_per_kwh = 400.0\n"
                    f"[carbon.clusters.{table}]\nintensity_g_per_kwh = 123.0\n", "utf-8")
    out = tmp_path / table
    assert main(["--config", str(conf), "report", "--month", "2022-05", "--store", str(db),
                 "--out", str(out)]) == 0
    said = capsys.readouterr().out
    return said, json.loads((out / "fleetwatch-energy-2022-05.json").read_text())


def test_a_cluster_table_that_matches_no_cluster_is_warned_of(tmp_path, capsys):
    said, s = report(tmp_path, capsys, "c-esat")
    warning = ("[carbon.clusters.c-esat] matches no cluster with energy here (clusters: "
               "c-east, c-west): a misspelt name? Priced with [carbon]: c-east, c-west")
    assert f"warning: {warning}" in said
    assert s["clusters_warning"] == warning
    assert not any("c-esat" in m or "123" in m for m in s["method"])
    html = (tmp_path / "c-esat" / "fleetwatch-energy-2022-05.html").read_text()
    assert "c-esat" in html and "Table unused" in html


def test_a_table_that_matches_its_cluster_is_not(tmp_path, capsys):
    said, s = report(tmp_path, capsys, "c-east")
    assert "warning" not in said and s["clusters_warning"] == ""
    assert any(m.startswith("Cluster c-east: grid intensity 123") for m in s["method"])
