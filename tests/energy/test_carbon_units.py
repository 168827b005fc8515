"""A grid file's unit and time zone are read from its header or declared, never guessed:
lb/MWh read as g/kWh gave 2.2 x the CO2e, a kg/kWh constant a thousandth of it, and a
file of local hours was read as UTC without a word."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetwatch.carbon import CarbonDataError, build_model, model_from_config
from fleetwatch.carbon_units import LB_KG
from fleetwatch.cli import main
from fleetwatch.config import ConfigError, EnergyConfig, load

from .test_report import one_gpu_hour

MAY1 = 1651363200  # 2022-05-01 00:00 UTC


def grid(tmp_path: Path, header: str, rows: list[tuple[str, str]]) -> Path:
    p = tmp_path / "grid.csv"
    p.write_text(header + "\n" + "".join(f"{t},{v}\n" for t, v in rows), "utf-8")
    return p


def test_a_column_named_in_lb_per_mwh_is_converted_exactly(tmp_path):
    p = grid(tmp_path, "timestamp,co2_lb_per_mwh", [("2022-05-01T00:00Z", "1000")])
    model = build_model("USA", 0.0, str(p), "co2_lb_per_mwh", 1.0, "", "pue", 0, "USD")
    # 1000 lb/MWh = 453.59237 kg/MWh = 453.59237 g/kWh: 1 kWh emits 453.59237 g.
    assert model.co2e_g(3.6e6, MAY1) == pytest.approx(1000 * LB_KG)
    assert "co2_lb_per_mwh; lb/MWh, x 0.453592 to gCO2e/kWh (from its name)" in (
        model.intensity_source)


@pytest.mark.parametrize(("column", "value", "g_per_kwh"), [
    ("co2_kg_per_mwh", "400", 400.0), ("co2_kg_per_kwh", "0.4", 400.0),
    ("Carbon Intensity gCO₂eq/kWh (direct)", "400", 400.0), ("CO2e (t/MWh)", "0.4", 400.0)])
def test_each_unit_a_column_names_is_converted(tmp_path, column, value, g_per_kwh):
    p = grid(tmp_path, f'timestamp,"{column}"', [("2022-05-01T00:00Z", value)])
    model = build_model("USA", 0.0, str(p), column, 1.0, "", "pue", 0, "USD")
    assert model.hour(MAY1).intensity_g_per_kwh == pytest.approx(g_per_kwh)


def test_the_config_declares_a_unit_the_header_does_not_and_may_not_contradict_it(tmp_path):
    p = grid(tmp_path, "timestamp,avg_CI", [("2022-05-01T00:00Z", "500")])
    model = build_model("USA", 0.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD",
                        intensity_unit="lb/MWh")
    assert model.hour(MAY1).intensity_g_per_kwh == pytest.approx(500 * LB_KG)
    assert "(carbon.intensity_csv_unit)" in model.intensity_source
    q = grid(tmp_path, "timestamp,co2_kg_per_kwh", [("2022-05-01T00:00Z", "0.4")])
    with pytest.raises(CarbonDataError, match=r"carbon.intensity_csv_unit = 'lb/MWh' but the "
                       r"column's name 'co2_kg_per_kwh' says kg/kWh"):
        build_model("USA", 0.0, str(q), "co2_kg_per_kwh", 1.0, "", "pue", 0, "USD",
                    intensity_unit="lb/MWh")


def test_an_undeclared_unit_is_g_per_kwh_only_where_the_values_can_be(tmp_path):
    p = grid(tmp_path, "timestamp,avg_CI", [("2022-05-01T00:00Z", "300")])
    model = build_model("USA", 0.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD")
    assert model.hour(MAY1).intensity_g_per_kwh == 300.0
    assert "read as gCO2e/kWh: neither its name nor carbon.intensity_csv_unit names a unit" \
        in model.intensity_source
    # A coal grid's lb/MWh (2,000) is no grid's g/kWh: refused, naming the value and the fix.
    q = grid(tmp_path, "timestamp,avg_CI", [("2022-05-01T00:00Z", "2100"),
                                            ("2022-05-01T01:00Z", "1900")])
    with pytest.raises(CarbonDataError) as err:
        build_model("USA", 0.0, str(q), "avg_CI", 1.0, "", "pue", 0, "USD")
    assert str(err.value) == (
        f"{q}: column 'avg_CI' names no unit, and read as gCO2e/kWh its mean is 2000, above "
        "any grid's average in gCO2e/kWh (at most about 1500, lignite alone): is the column "
        "in lb/MWh? set carbon.intensity_csv_unit = \"lb/MWh\" (or the unit it is in)")


def test_a_constant_in_kg_per_kwh_or_lb_per_mwh_is_an_error_at_load_and_refused_by_carbon(
        tmp_path, caplog):
    """Logged as an error when the config loads (alerting runs on), refused where CO2e is
    computed (the report, the energy page)."""
    path = tmp_path / "fw.toml"
    cases = [("[carbon]\nintensity_g_per_kwh = 0.42\n",
              r"fw.toml.*carbon.intensity_g_per_kwh = 0.42 is no grid's gCO2e/kWh .*did you "
              r"mean kg/kWh \(or t/MWh\)\? multiply by 1000"),
             ("[carbon]\nintensity_g_per_kwh = 2000\n",
              r"did you mean lb/MWh\? multiply by 0.453592"),
             ("[carbon.clusters.eu]\nintensity_g_per_kwh = 0.05\n",
              r"carbon.clusters.eu.intensity_g_per_kwh = 0.05")]
    for text, said in cases:
        path.write_text(text)
        caplog.clear()
        config = load(path, env={})
        assert any(r.levelname == "ERROR" and re.search(said, r.getMessage())
                   for r in caplog.records), text
        with pytest.raises(CarbonDataError, match=said.removeprefix("fw.toml.*")):
            model_from_config(config.carbon, EnergyConfig())
    caplog.clear()
    config = load(None, env={"FLEETWATCH_CARBON_INTENSITY_G_PER_KWH": "0.42"})
    assert "did you mean kg/kWh" in caplog.text
    with pytest.raises(CarbonDataError, match="did you mean kg/kWh"):
        model_from_config(config.carbon, EnergyConfig())
    path.write_text("[carbon]\nintensity_g_per_kwh = 420\n")
    caplog.clear()
    assert load(path, env={}).carbon.intensity_g_per_kwh == 420.0
    assert not caplog.records


def test_a_refused_carbon_setting_stops_the_report_not_the_alerting_commands(tmp_path, capsys,
                                                                             caplog):
    db, conf = one_gpu_hour(tmp_path, MAY1 + 3 * 86400, 1000.0)
    conf.write_text("[carbon]\nintensity_g_per_kwh = 0.42\n")
    base = ["--config", str(conf)]
    assert main([*base, "alerts", "--store", str(db)]) == 0
    assert main([*base, "silence", "list", "--store", str(db)]) == 0
    assert "did you mean kg/kWh" in caplog.text  # an error logged, alerting goes on
    assert main([*base, "report", "--month", "2022-05", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 1
    assert "did you mean kg/kWh" in capsys.readouterr().err


def test_the_dashboard_model_of_refused_settings_says_co2e_is_unknown(tmp_path):
    from fleetwatch import amounts
    from fleetwatch.carbon import model_or_unknown
    from fleetwatch.config import CarbonConfig

    naive = grid(tmp_path, "timestamp,avg_CI", [("2022-05-04 00:00", "300")])
    for carbon in (CarbonConfig(intensity_g_per_kwh=0.42), CarbonConfig(intensity_csv=str(naive))):
        model = model_or_unknown(carbon, EnergyConfig())
        assert model.problem and model.co2e_g(3.6e6, MAY1) != model.co2e_g(3.6e6, MAY1)
        assert amounts.mass(model.co2e_g(3.6e6, MAY1) / 1000) == "CO2e unknown"
    good = model_or_unknown(CarbonConfig(intensity_g_per_kwh=420.0, pue=1.0), EnergyConfig())
    assert not good.problem and good.co2e_g(3.6e6, MAY1) == 420.0


def test_a_time_column_named_after_utc_is_utc_and_one_without_zone_is_refused(tmp_path):
    # An ElectricityMaps export: its time column says UTC, its value column the unit.
    column = "Carbon Intensity gCO₂eq/kWh (direct)"
    p = grid(tmp_path, f"Datetime (UTC),Zone Id,{column}",
             [("2022-05-01 00:00:00", "US-CAL-CISO,222"), ("2022-05-01 01:00:00", "x,260")])
    model = build_model("USA", 0.0, str(p), column, 1.0, "", "pue", 0, "USD")
    assert (model.hour(MAY1).intensity_g_per_kwh,
            model.hour(MAY1 + 3600).intensity_g_per_kwh) == (222.0, 260.0)
    # EIA-930 stamps an hour by its end.
    q = grid(tmp_path, "UTC Time at End of Hour,co2_kg_per_mwh", [("2022-05-01 01:00", "300")])
    model = build_model("USA", 0.0, str(q), "co2_kg_per_mwh", 1.0, "", "pue", 0, "USD")
    assert model.intensity is not None and model.intensity.values == {MAY1: 300.0}
    naive = grid(tmp_path, "timestamp,avg_CI", [("2022-05-01 00:00", "300")])
    with pytest.raises(CarbonDataError, match=r"grid.csv:2: timestamp '2022-05-01 00:00' has "
                       r"no UTC offset .* or set carbon.intensity_csv_timezone = \"UTC\""):
        build_model("USA", 0.0, str(naive), "avg_CI", 1.0, "", "pue", 0, "USD")
    with pytest.raises(CarbonDataError, match=r"set carbon.pue_csv_timezone"):
        build_model("USA", 300.0, "", "avg_CI", 1.0, str(naive), "avg_CI", 0, "USD")


def test_a_declared_zone_reads_local_hours_across_the_autumn_repeat(tmp_path):
    # Los Angeles: 2022-11-06 01:00 happens twice (PDT, then PST).
    p = grid(tmp_path, "timestamp,avg_CI", [
        ("2022-11-06 00:00", "100"), ("2022-11-06 01:00", "200"), ("2022-11-06 01:00", "300"),
        ("2022-11-06 02:00", "400")])
    model = build_model("USA", 0.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD",
                        intensity_zone="America/Los_Angeles")
    h = 1667718000  # 2022-11-06 07:00 UTC = 00:00 PDT
    assert model.intensity is not None
    assert model.intensity.values == {h: 100.0, h + 3600: 200.0, h + 7200: 300.0,
                                      h + 3 * 3600: 400.0}


def test_the_config_keys_reach_the_model_and_the_cli_report(tmp_path, capsys):
    db, conf = one_gpu_hour(tmp_path, MAY1 + 3 * 86400, 1000.0)
    p = grid(tmp_path, "timestamp,avg_CI", [("2022-05-04 00:00", "1000")])
    conf.write_text(f'[carbon]\nintensity_csv = "{p}"\nintensity_csv_unit = "lb/MWh"\n'
                    'intensity_csv_timezone = "UTC"\npue = 1.0\n')
    carbon = model_from_config(load(conf, env={}).carbon, EnergyConfig())
    assert carbon.hour(MAY1 + 3 * 86400).intensity_g_per_kwh == pytest.approx(1000 * LB_KG)
    assert main(["--config", str(conf), "report", "--month", "2022-05", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 0
    # 1 kWh at 1000 lb/MWh: 0.454 kg, not 1 kg.
    assert capsys.readouterr().out.startswith("2022-05: 0.454 kg CO2e, 1.00 kWh facility")
    conf.write_text(f'[carbon]\nintensity_csv = "{p}"\n')
    assert main(["--config", str(conf), "report", "--month", "2022-05", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 1
    assert "set carbon.intensity_csv_timezone" in capsys.readouterr().err


def test_a_local_row_for_the_hour_skipped_in_spring_is_named_as_such(tmp_path):
    rows = [(f"2026-03-08 0{h}:00:00", str(200 + h)) for h in range(5)]  # 02:00 is no time
    p = grid(tmp_path, "timestamp,avg_CI", rows)
    with pytest.raises(CarbonDataError) as err:
        build_model("USA", 0.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD",
                    intensity_zone="America/Los_Angeles")
    assert str(err.value) == (
        f"{p}:4: timestamp '2026-03-08 02:00:00' does not exist in America/Los_Angeles: the "
        "clocks skip that hour when they go forward (daylight saving time); drop the row, or "
        "merge it into the hour before or after")


def test_the_unit_settings_messages_and_spellings(tmp_path):
    path = tmp_path / "fw.toml"
    for spelled in ("gCO2/kWh", "gCO2e/kWh", "gCO₂eq/kWh", "g/kWh"):
        path.write_text(f'[carbon]\nintensity_csv_unit = "{spelled}"\n')
        assert load(path, env={}).carbon.intensity_csv_unit == "g/kWh", spelled
    path.write_text('[carbon]\nintensity_csv_unit = "lb/GWh"\n')
    with pytest.raises(ConfigError, match=r"must be one of \"\", g/kWh, kg/MWh, lb/MWh"):
        load(path, env={})
    # A t/MWh figure is under 1, never 1800: the hint for 1800 is lb/MWh alone.
    from fleetwatch.config import CarbonConfig
    from fleetwatch.config_rules import carbon_problems

    (high,) = carbon_problems(CarbonConfig(intensity_g_per_kwh=1800.0))
    assert high.endswith("did you mean lb/MWh? multiply by 0.453592")
    (low,) = carbon_problems(CarbonConfig(intensity_g_per_kwh=0.42))
    assert low.endswith("did you mean kg/kWh (or t/MWh)? multiply by 1000")
