"""The monthly report: exact totals, every breakdown sums to the total, ground truth, CLI."""

from __future__ import annotations

import calendar
import csv
import json
import time
from pathlib import Path

import pytest

from fleetwatch.carbon import J_PER_KWH, build_model, read_hourly_csv
from fleetwatch.cli import main
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import KINDS, build
from fleetwatch.report_files import write_report
from fleetwatch.report_month import (
    HourData,
    ReportError,
    month_projection,
    month_span,
    resolve_month,
)

from .helpers import frame

CISO = Path(__file__).resolve().parents[1] / "data" / "carbon" / "eia_hourly_2022_CISO.csv"
MAY = month_span("2022-05")


def model(intensity: float = 400.0, pue: float = 1.5, csv_path: str = ""):
    return build_model("USA", intensity, csv_path, "avg_CI", pue, "", "pue", 0.10, "USD")


def test_month_span_and_bad_months():
    assert month_span("2022-05") == (1651363200, 1651363200 + 31 * 86400)
    for bad in ("2022-13", "22-05", "2022/05", "May", "2022-5"):
        with pytest.raises(ReportError, match="YYYY-MM"):
            month_span(bad)


def test_previous_and_current_months_are_utc_months():
    # 2027-01-01 00:30 UTC (still 2026-12-31 in New York): the previous month is December.
    new_year = calendar.timegm((2027, 1, 1, 0, 30, 0))
    assert resolve_month("previous", new_year) == "2026-12"
    assert resolve_month("current", new_year) == "2027-01"
    assert resolve_month("previous", calendar.timegm((2026, 3, 31, 23, 0, 0))) == "2026-02"
    assert resolve_month("2022-05", new_year) == "2022-05"
    with pytest.raises(ReportError, match="previous or current"):
        month_span(resolve_month("last", new_year))


def test_known_profile_gives_exact_kwh_co2e_and_cost(tmp_path):
    # Two GPUs for 2 h at 300 W (job a, alice) and 100 W idle (no job): 0.8 kWh IT.
    store = SqliteStore(tmp_path / "s.db")
    t0 = MAY[0] + 86400
    EnergyIntegrator(store).observe([
        frame(t0 + 15 * i, {0: {"gpu_power_w": 300.0, "gpu_sm_active_ratio": 0.9}}, job="a",
              user="alice") for i in range(481)])
    EnergyIntegrator(store).observe([
        frame(t0 + 15 * i, {1: {"gpu_power_w": 100.0, "gpu_sm_active_ratio": 0.0}}, node="n2")
        for i in range(481)])
    r = build(store.energy(*MAY), model(), *MAY, "2022-05")
    assert r.total.it_kwh == pytest.approx(0.8)
    assert r.total.facility_kwh == pytest.approx(1.2)
    assert r.total.co2e_kg == pytest.approx(1.2 * 0.4)
    assert r.total.cost == pytest.approx(0.12)
    assert r.total.gpu_hours == pytest.approx(4.0)
    assert r.total.idle_kwh == pytest.approx(0.2)
    assert r.total.idle_energy_share == pytest.approx(0.25)
    assert r.total.idle_time_share == pytest.approx(0.5)
    jobs = {x.name: x for x in r.lines["job"]}
    assert jobs["a"].co2e_kg == pytest.approx(0.6 * 1.5 * 0.4)
    assert jobs["(no job)"].idle_time_share == pytest.approx(1.0)


def test_every_breakdown_sums_to_the_total_in_csv_and_json(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    sim = FleetSim(SimParams(nodes=4, gpus=4, seed=3, interval_s=15.0), MAY[0] + 16 * 86400)
    processor = Processor(store)
    for _ in range(4):
        frames = []
        for _ in range(240):
            sim.step()
            frames.extend(sim.frames())
        processor.process(frames)
    paths = write_report(store, model(csv_path=str(CISO)), "2022-05", tmp_path / "out")
    summary = json.loads(paths["json"].read_text())
    with paths["csv"].open() as f:
        rows = list(csv.DictReader(f))
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        assert mine, kind
        for field in ("it_kwh", "co2e_kg", "cost", "gpu_hours"):
            assert sum(float(r[field]) for r in mine) == pytest.approx(
                summary[field], rel=1e-6, abs=1e-5), (kind, field)
    assert summary["co2e_kg"] > 0 and summary["missing_gpu_hours"] == 0
    page = paths["html"].read_text()
    assert "Method and sources" in page and "eia_hourly_2022_CISO.csv" in page
    assert "plotly" in page and "<script" in page


@pytest.mark.parametrize("with_counter", [True, False])
def test_a_simulated_fleet_matches_the_simulators_ground_truth(tmp_path, with_counter):
    """Through the processor, a day of 8 x 8 GPUs: the ledger's energy within 1% of the
    simulator's (with NVML's energy counter: within 0.01%; from power samples alone: 1%)."""
    store = SqliteStore(tmp_path / "s.db")
    sim = FleetSim(SimParams(nodes=8, gpus=8, seed=1, interval_s=15.0), MAY[0] + 86400)
    processor = Processor(store)
    first = None
    for _ in range(24):
        frames = []
        for _ in range(240):
            sim.step()
            if first is None:
                first = sim.energy_j.sum()  # energy at the first sample: integration starts here
            batch = sim.frames()
            if not with_counter:
                for f in batch:
                    for g in f.gpus:
                        del g.metrics["gpu_energy_j"]
            frames.extend(batch)
        processor.process(frames)
    truth = sim.energy_j.sum() - first
    ledger = sum(r.energy_j for r in store.energy(*MAY) if r.device.startswith("gpu"))
    tolerance = 1e-4 if with_counter else 1e-2
    assert ledger == pytest.approx(truth, rel=tolerance)


def one_gpu_hour(tmp_path, start: float, watts: float):
    """A store whose ledger holds one GPU at ``watts`` for an hour from ``start``, and a
    config of 500 g CO2e per kWh at PUE 1."""
    db = tmp_path / "s.db"
    store = SqliteStore(db)
    EnergyIntegrator(store).observe([
        frame(start + 15 * i, {0: {"gpu_power_w": watts, "gpu_sm_active_ratio": 0.5}}, job="j")
        for i in range(241)])
    store.close()
    conf = tmp_path / "c.toml"
    conf.write_text('[carbon]\nintensity_g_per_kwh = 500.0\npue = 1.0\n')
    return db, conf


def test_cli_report_writes_three_files_and_says_the_number(tmp_path, capsys):
    db, conf = one_gpu_hour(tmp_path, MAY[0] + 3 * 86400, 250.0)
    assert main(["--config", str(conf), "report", "--month", "2022-05", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    # 250 W for 1 h = 0.25 kWh, at 500 g/kWh = 0.125 kg: in units that show it.
    assert "2022-05: 0.125 kg CO2e, 0.250 kWh facility (0.250 kWh IT)" in out
    # What facility kWh leaves out, and the key that counts it, under the headline.
    assert ("\n  IT energy is GPUs and CPU packages only: the rest of the node (fans, NICs, "
            "NVSwitches, memory, PSU losses) is not counted while energy.node_static_w is 0"
            ) in out
    # May 2022 has ended, with one hour of data: partial, said so, and no projection.
    assert ("partial month: data from 04 May 00:00 to 04 May 01:00 UTC; only 1 of the "
            "month's 744 hours have data (0.13%)") in out
    assert "projected" not in out
    summary = json.loads((tmp_path / "out" / "fleetwatch-energy-2022-05.json").read_text())
    assert summary["co2e_kg"] == pytest.approx(0.125)
    assert (summary["status"], summary["complete"], summary["projected_co2e_kg"]) == (
        "partial", False, None)
    assert (summary["hours_with_data"], summary["hours_so_far"]) == (1, 744)
    assert (summary["covered_from"], summary["covered_until"]) == (
        "2022-05-04T00:00:00+00:00", "2022-05-04T01:00:00+00:00")
    page = (tmp_path / "out" / "fleetwatch-energy-2022-05.html").read_text()
    assert "0.125 kg CO2e" in page and "0.250 kWh" in page and "1 of 744" in page
    assert "energy.node_static_w is 0" in page  # what IT energy leaves out, said
    assert "A node silent for longer than 7 days is not counted as missing" in page
    assert main(["--config", str(conf), "report", "--month", "2022-06", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 1
    assert "no energy in the ledger for 2022-06" in capsys.readouterr().err
    assert main(["report", "--month", "2022-06", "--store", str(tmp_path / "none.db")]) == 1
    capsys.readouterr()
    assert main(["--config", str(conf), "report", "--month", "2022-05", "--store", str(db),
                 "--out", "/proc/fleetwatch-reports"]) == 1
    err = capsys.readouterr().err
    assert "--out '/proc/fleetwatch-reports': cannot write" in err and "Traceback" not in err


def test_cli_report_of_the_previous_month_as_the_monthly_timer_runs_it(tmp_path, capsys):
    previous = resolve_month("previous", time.time())
    db, conf = one_gpu_hour(tmp_path, month_span(previous)[0] + 2 * 86400, 400.0)
    assert main(["--config", str(conf), "report", "--month", "previous", "--store", str(db),
                 "--out", str(tmp_path / "reports")]) == 0
    assert capsys.readouterr().out.startswith(f"{previous}: 0.200 kg CO2e, 0.400 kWh facility")
    summary = json.loads((tmp_path / "reports" / f"fleetwatch-energy-{previous}.json")
                         .read_text())
    assert summary["co2e_kg"] == pytest.approx(0.2)
    assert main(["report", "--month", "last", "--store", str(db)]) == 1
    assert "'last': expected YYYY-MM (e.g. 2026-11), previous or current" in (
        capsys.readouterr().err)


def test_the_ciso_hole_is_filled_and_counted(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    hole = 1652810400  # 2022-05-17 18:00 UTC, empty in the EIA file
    EnergyIntegrator(store).observe([frame(hole - 3600 + 15 * i, {0: {"gpu_power_w": 200.0}})
                                     for i in range(3 * 240 + 1)])
    series = read_hourly_csv(CISO, "avg_CI")
    r = build(store.energy(*MAY), model(csv_path=str(CISO)), *MAY, "2022-05")
    assert r.intensity_filled_hours == 1
    expected = 0.2 * 1.5 * (series.values[hole - 3600] + series.at(hole)[0]
                            + series.values[hole + 3600]) / 1000
    assert r.total.co2e_kg == pytest.approx(expected)


def test_a_wrong_carbon_file_is_named(tmp_path, capsys):
    conf = tmp_path / "c.toml"
    conf.write_text(f'[carbon]\nintensity_csv = "{tmp_path / "nope.csv"}"\n')
    assert main(["--config", str(conf), "report", "--month", "2022-05",
                 "--store", str(tmp_path / "s.db")]) == 1
    assert "nope.csv: cannot read" in capsys.readouterr().err
    conf.write_text('[carbon]\ncountry = "ATLANTIS"\n')
    assert main(["--config", str(conf), "report", "--month", "2022-05",
                 "--store", str(tmp_path / "s.db")]) == 1
    assert "carbon.country 'ATLANTIS'" in capsys.readouterr().err
    # `dashboard` and `up` serve on, the energy page saying CO2e is unknown and why
    from fleetwatch.carbon import model_or_unknown
    from fleetwatch.config import load

    config = load(conf, env={})
    assert "carbon.country 'ATLANTIS'" in model_or_unknown(config.carbon, config.energy).problem


def test_simulate_integrates_with_the_configured_node_model(tmp_path, capsys):
    conf = tmp_path / "c.toml"
    conf.write_text("[energy]\nnode_static_w = 1000.0\n")
    db = tmp_path / "s.db"
    assert main(["--config", str(conf), "simulate", "--duration", "1h", "--end",
                 str(MAY[0] + 86400), "--store", str(db), "--nodes", "1", "--gpus", "2",
                 "--no-faults"]) == 0
    rows = SqliteStore(db).energy(*MAY)
    # The rest of the node, 1 kW from the first sample to the last (one 15 s step short).
    assert sum(r.energy_j for r in rows if r.device == "rest") == pytest.approx(
        1000.0 * (3600 - 15))
    assert sum(r.seconds for r in rows if r.device.startswith("gpu")) == pytest.approx(
        2 * (3600 - 15))
    capsys.readouterr()
    assert main(["--config", str(conf), "report", "--month", "2022-05", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 0
    assert "is not counted" not in capsys.readouterr().out  # the rest of the node is


def gpu_hours_rows(hours) -> list[EnergyRow]:
    """One GPU at 1 kWh in each of these hours."""
    return [EnergyRow(int(h), "c1", "r1", "n1", "gpu0", "j", "u", "t", J_PER_KWH, 0.0,
                      3600.0, 0.0, 0.0, 0.0) for h in hours]


def test_a_month_is_complete_partial_or_to_date_and_projected_only_while_it_runs():
    start, end = MAY
    every = range(start, end, 3600)
    m = model()
    done = build(gpu_hours_rows(every), m, start, end, "2022-05", now=end + 7200)
    assert (done.status, done.complete, done.projected_co2e_kg) == ("complete", True, None)
    assert done.hours_with_data == done.hours_so_far == 744
    assert done.coverage() == "complete month"
    # The processors were down for a day mid-month: the month ended, but is partial.
    holed = [h for h in every if not start + 10 * 86400 <= h < start + 11 * 86400]
    partial = build(gpu_hours_rows(holed), m, start, end, "2022-05", now=end + 7200)
    assert (partial.status, partial.projected_co2e_kg) == ("partial", None)
    assert partial.coverage().endswith("only 720 of the month's 744 hours have data (97%)")
    # Ten days in, data from the start: the rest at the same rate, as the dashboard says.
    now = start + 10 * 86400
    running = build(gpu_hours_rows(range(start, now, 3600)), m, start, end, "2022-05",
                    now=now)
    assert running.status == "month_to_date" and not running.complete
    assert running.projected_co2e_kg == pytest.approx(running.total.co2e_kg * 31 / 10)
    assert running.projected_co2e_kg == pytest.approx(
        month_projection(running.total.co2e_kg,
                         [HourData(h, 3600.0, 0.0, 1.0) for h in range(start, now, 3600)],
                         start, now, start, end)[0])
    assert running.coverage() == ("month to date: data from 01 May 00:00 to 11 May 00:00 "
                                  "UTC; 240 of the month's first 240 hours have data (100%)")


def test_an_hourly_series_that_misses_the_month_is_a_warning_not_a_silent_constant(
        tmp_path, capsys):
    db, _ = one_gpu_hour(tmp_path, month_span("2023-03")[0] + 86400, 400.0)
    conf = tmp_path / "ciso.toml"
    conf.write_text(f'[carbon]\nintensity_csv = "{CISO}"\nintensity_g_per_kwh = 300.0\n')
    assert main(["--config", str(conf), "report", "--month", "2023-03", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert ("warning: 1 of 1 hours use the fallback intensity 300 gCO2e/kWh: the hourly "
            "series covers 2022-01-01 00:00 to 2022-12-31 23:00 UTC") in out
    summary = json.loads((tmp_path / "out" / "fleetwatch-energy-2023-03.json").read_text())
    assert summary["intensity_fallback_hours"] == 1 and summary["pue_fallback_hours"] == 0
    assert summary["co2e_kg"] == pytest.approx(0.4 * 1.2 * 0.3)   # default PUE 1.2
    assert "Fallback used" in (tmp_path / "out" / "fleetwatch-energy-2023-03.html").read_text()


def test_a_month_that_has_not_begun_is_said_to_be_in_the_future(tmp_path, capsys):
    db, conf = one_gpu_hour(tmp_path, MAY[0] + 3 * 86400, 250.0)
    store = SqliteStore(db)
    with pytest.raises(ReportError) as err:
        write_report(store, model(), "2022-07", tmp_path / "out", "s.db", now=MAY[0] + 86400)
    store.close()
    assert str(err.value).startswith(
        "2022-07 has not begun: it starts 2022-07-01 00:00 UTC, and it is 2022-05-02 00:00 "
        "UTC now; choose a month that has begun")
    assert main(["--config", str(conf), "report", "--month", "2199-01", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 1
    assert "2199-01 has not begun" in capsys.readouterr().err
    # A past month without data is still an empty ledger, not a future one.
    assert main(["--config", str(conf), "report", "--month", "2022-06", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 1
    assert "no energy in the ledger for 2022-06" in capsys.readouterr().err
