"""Per-cluster carbon: each cluster priced with its own grid and PUE, else the global one."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.carbon import J_PER_KWH, model_from_config
from fleetwatch.config import ConfigError, EnergyConfig, load
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.report import build
from fleetwatch.report_month import month_span

DATA = Path(__file__).resolve().parents[1] / "data" / "carbon"
CISO = DATA / "eia_hourly_2022_CISO.csv"
MAY = month_span("2022-05")
H = MAY[0] + 86400

CONFIG = f"""
[carbon]
intensity_csv = "{CISO}"
pue = 1.5

[carbon.clusters.c-eu]
intensity_g_per_kwh = 50.0

[carbon.clusters.c-ap]
pue = 1.1
"""


def config(tmp_path: Path, text: str = CONFIG, env: dict[str, str] | None = None):
    path = tmp_path / "fw.toml"
    path.write_text(text, "utf-8")
    return load(path, env=env or {})


def test_a_cluster_table_takes_a_group_whole_and_inherits_the_other(tmp_path):
    carbon = config(tmp_path, env={"FLEETWATCH_CARBON_PUE": "1.4"}).carbon
    eu, ap = carbon.clusters["c-eu"], carbon.clusters["c-ap"]
    # c-eu sets its grid: the global intensity_csv must not outrank its constant.
    assert (eu.intensity_g_per_kwh, eu.intensity_csv) == (50.0, "")
    assert eu.pue == 1.4  # PUE untouched: the global one (the environment's here)
    # c-ap sets its PUE only: the global grid (the CISO file) is its grid.
    assert (ap.intensity_csv, ap.pue) == (str(CISO), 1.1)
    assert carbon.clusters["c-eu"].clusters == {}


@pytest.mark.parametrize("text, env, said", [
    (CONFIG + "\n[carbon.clusters.c-x]\npue = 0.5\n", {},
     r"\[carbon.clusters.c-x\] pue: carbon.clusters.c-x.pue = 0.5"),
    (CONFIG + "\n[carbon.clusters.c-x]\ngrid = 1\n", {}, "unknown key carbon.clusters.c-x.grid"),
    ("", {"FLEETWATCH_CARBON_CLUSTERS": "c-eu"}, r"TOML file: \[carbon.clusters.NAME\]"),
])
def test_a_wrong_cluster_table_is_named(tmp_path, text, env, said):
    with pytest.raises(ConfigError, match=said):
        config(tmp_path, text, env)


def row(cluster: str, node: str = "node001") -> EnergyRow:
    return EnergyRow(H, cluster, "r1", node, "gpu0", "j", "u", "t", J_PER_KWH, 0.0,
                     3600.0, 0.0, 0.0, 0.0)


def test_the_report_prices_each_cluster_with_its_own_grid_and_pue(tmp_path):
    model = model_from_config(config(tmp_path).carbon, EnergyConfig())
    ciso = model.hour(H).intensity_g_per_kwh
    r = build([row("c-east"), row("c-eu"), row("c-ap")], model, *MAY, "2022-05")
    kg = {x.name: x.co2e_kg for x in r.lines["cluster"]}
    assert kg["c-east"] == pytest.approx(1.5 * ciso / 1000)   # the global grid and PUE
    assert kg["c-eu"] == pytest.approx(1.5 * 50.0 / 1000)    # its grid, the global PUE
    assert kg["c-ap"] == pytest.approx(1.1 * ciso / 1000)     # the global grid, its PUE
    assert r.total.co2e_kg == pytest.approx(sum(kg.values()))
    fac = {x.name: x.facility_kwh for x in r.lines["cluster"]}
    assert fac == {"c-east": pytest.approx(1.5), "c-eu": pytest.approx(1.5),
                   "c-ap": pytest.approx(1.1)}
    method = " ".join(r.method)
    assert "c-eu" in method and "50 gCO2e/kWh (site constant)" in method


def test_the_html_report_draws_and_names_each_clusters_grid(tmp_path):
    from fleetwatch.pipeline.store.sqlite import SqliteStore
    from fleetwatch.report_files import write_report

    store = SqliteStore(tmp_path / "s.db")
    store.write_energy([row("c-east"), row("c-eu")], [])
    model = model_from_config(config(tmp_path).carbon, EnergyConfig())
    paths = write_report(store, model, "2022-05", tmp_path / "out", now=MAY[1] + 10)
    page = paths["html"].read_text()
    assert "grid intensity (c-eu)" in page and "Cluster c-eu: grid intensity 50" in page


def test_cli_report_from_a_config_file_prices_clusters_apart(tmp_path, capsys):
    import csv

    from fleetwatch.cli import main
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    db = tmp_path / "s.db"
    SqliteStore(db).write_energy([row("c-east"), row("c-eu")], [])
    conf = tmp_path / "fw.toml"
    conf.write_text("[carbon]\nintensity_g_per_kwh = 400.0\npue = 1.5\n"
                    "[carbon.clusters.c-eu]\ncountry = \"FRA\"\n", "utf-8")
    assert main(["--config", str(conf), "report", "--month", "2022-05", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    with (tmp_path / "out" / "fleetwatch-energy-2022-05.csv").open() as f:
        kg = {r["name"]: float(r["co2e_kg"]) for r in csv.DictReader(f) if r["kind"] == "cluster"}
    from fleetwatch.carbon import country_intensity
    assert kg["c-east"] == pytest.approx(1.5 * 0.4, abs=1e-6)
    assert kg["c-eu"] == pytest.approx(1.5 * country_intensity("FRA")[0] / 1000, abs=1e-6)
    assert main(["--config", str(conf), "config"]) == 0
    assert "c-eu" in capsys.readouterr().out
