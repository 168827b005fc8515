""""Idle share" is the share of GPU time everywhere a capacity figure shows it; the share
of GPU energy is named "idle energy". A job idle 80% of its GPU time at 60 W, busy the
rest at 400 W, spends 37.5% of its GPU energy idle: both figures, each under its name.
The report CSV's ``idle_share`` column alone keeps its earlier meaning (the energy share)
for the consumers that read it."""

from __future__ import annotations

import csv

import pytest

from fleetwatch.carbon import build_model
from fleetwatch.dashboards import energy_figures
from fleetwatch.dashboards.energy_data import read_energy
from fleetwatch.dashboards.theme import PENDING
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import build
from fleetwatch.report_files import write_csv
from fleetwatch.report_html import render
from fleetwatch.report_month import month_span

MAY = month_span("2022-05")
HOUR = MAY[0] + 86400
# 720 s busy at 400 W, 2,880 s idle at 60 W: 80% of the time idle, 37.5% of the energy.
ROW = EnergyRow(HOUR, "c1", "r1", "n1", "gpu0", "1003", "dave", "", 400.0 * 720 + 60.0 * 2880,
                60.0 * 2880, 3600.0, 2880.0, 0.0, 0.0)


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "s.db")
    s.write_energy([ROW], [])
    yield s
    s.close()


def model():
    return build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")


# The columns of the previous release, in its order: consumers read them by name or place.
OLD_CSV = ["kind", "name", "it_kwh", "facility_kwh", "co2e_kg", "cost", "gpu_hours", "gpu_kwh",
           "idle_share", "idle_kwh", "idle_gpu_hours", "over_tdp_gpu_hours",
           "missing_gpu_hours"]


def test_the_report_csv_names_the_time_share_and_the_energy_share_apart(store, tmp_path):
    r = build(store.energy(*MAY), model(), *MAY, "2022-05")
    write_csv(r, tmp_path / "r.csv")
    with (tmp_path / "r.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    job = next(x for x in rows if x["kind"] == "job" and x["name"] == "1003")
    assert float(job["idle_time_share"]) == pytest.approx(0.8)
    assert float(job["idle_energy_share"]) == pytest.approx(0.375)


def test_the_report_csv_keeps_the_previous_columns_in_place_and_adds_the_new_at_the_end(
        store, tmp_path):
    """``idle_share`` keeps its place and its meaning (the energy share), so a consumer
    reading by name or by position gets what it got before; the new columns come last."""
    r = build(store.energy(*MAY), model(), *MAY, "2022-05")
    write_csv(r, tmp_path / "r.csv")
    with (tmp_path / "r.csv").open(encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    assert header == [*OLD_CSV, "idle_time_share", "idle_energy_share", "currency", "cluster",
                      "timezone", "month_start", "month_end"]
    job = next(x for x in rows if x[:2] == ["job", "1003"])
    assert float(job[8]) == pytest.approx(0.375)   # idle_share, by position as before
    line = next(x for x in r.lines["job"] if x.name == "1003")
    assert float(job[9]) == pytest.approx(line.idle_kwh)  # and the columns after it
    assert [float(v) for v in job[13:15]] == pytest.approx([0.8, 0.375])
    assert job[15] == r.currency == "USD" and job[16] == line.cluster
    assert job[17:] == ["UTC", "2022-05-01T00:00:00+00:00", "2022-06-01T00:00:00+00:00"]


def test_the_report_json_keeps_its_idle_keys(store, tmp_path):
    r = build(store.energy(*MAY), model(), *MAY, "2022-05")
    summary = r.summary()
    assert summary["idle_energy_share"] == pytest.approx(0.375)
    assert summary["idle_time_share"] == pytest.approx(0.8)


def test_the_report_tables_show_idle_share_of_time_and_idle_energy_each_named(store):
    page = render(build(store.energy(*MAY), model(), *MAY, "2022-05"))
    assert "<th>idle share (of GPU time)</th><th>idle energy (of GPU kWh)</th>" in page
    assert "<td>1.0</td><td>80.0%</td><td>37.5%</td>" in page  # GPU-hours, then both


def test_the_energy_page_colours_and_labels_a_job_by_its_idle_time(store):
    view = read_energy(store, model(), HOUR, HOUR + 3600, HOUR + 3600)
    (job,) = [s for s in view.jobs if s.name == "1003"]
    assert job.idle_time_share == pytest.approx(0.8)
    assert job.idle_energy_share == pytest.approx(0.375)
    bar = energy_figures.top_shares(view.jobs, "job").data[0]
    assert list(bar.marker.color) == [PENDING]  # mostly idle by time, though not by energy
    assert "of GPU time idle" in bar.hovertemplate and "idle energy" in bar.hovertemplate
