"""The report's month in a time zone (energy.timezone, report --tz): local midnights, hours a
half-hour offset cuts, months of 743 and 745 hours, and the grid's UTC hours it picks."""

from __future__ import annotations

import calendar
import csv
import dataclasses
import json

import pytest

from fleetwatch import config
from fleetwatch.carbon import J_PER_KWH, build_model
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import build
from fleetwatch.report_files import write_report
from fleetwatch.report_month import (
    ReportError,
    hour_share,
    hours_with_data,
    ledger_span,
    month_span,
    resolve_month,
    zone_name,
)


def utc(*t: int) -> int:
    return calendar.timegm((*t, 0, 0, 0)[:6])


def row(hour: int, kwh: float, seconds: float = 3600.0) -> EnergyRow:
    return EnergyRow(hour, "sim", "r1", "node001", "gpu0", "7", "alice", "ml",
                     kwh * J_PER_KWH, 0.0, seconds, 0.0, 0.0, 0.0)


def model(tz: str = "UTC", intensity_csv: str = ""):
    m = build_model("USA", 400.0, intensity_csv, "avg_CI", 1.0, "", "pue", 0.10, "USD")
    return dataclasses.replace(m, timezone=tz)


def test_month_boundaries_are_local_midnights():
    # Berlin's March begins at CET (UTC+1) and ends in CEST (UTC+2): 743 hours.
    assert month_span("2026-03", "Europe/Berlin") == (utc(2026, 2, 28, 23), utc(2026, 3, 31, 22))
    # October begins in CEST and ends in CET: 745 hours.
    start, end = month_span("2026-10", "Europe/Berlin")
    assert (start, end) == (utc(2026, 9, 30, 22), utc(2026, 10, 31, 23))
    assert (end - start) // 3600 == 745
    # Asia/Kolkata is UTC+5:30: its months begin and end inside a UTC hour.
    assert month_span("2026-11", "Asia/Kolkata") == (utc(2026, 10, 31, 18) + 1800,
                                                    utc(2026, 11, 30, 18) + 1800)
    # UTC: unchanged (and the default).
    assert month_span("2026-11", "UTC") == month_span("2026-11") == (utc(2026, 11, 1),
                                                                       utc(2026, 12, 1))


def test_previous_and_current_are_months_of_the_zone():
    now = utc(2026, 11, 30, 23, 30)  # 00:30 on 1 December in Berlin, 08:30 in Tokyo
    assert resolve_month("current", now) == "2026-11"
    assert resolve_month("current", now, "Europe/Berlin") == "2026-12"
    assert resolve_month("previous", now, "Asia/Tokyo") == "2026-11"


def test_a_half_hour_offset_splits_the_edge_hours_by_their_share():
    start, end = month_span("2026-11", "Asia/Kolkata")
    assert ledger_span(start, end) == (utc(2026, 10, 31, 18), utc(2026, 11, 30, 19))
    assert hour_share(utc(2026, 10, 31, 18), start, end) == 0.5
    assert hour_share(utc(2026, 10, 31, 19), start, end) == 1.0
    assert hour_share(utc(2026, 11, 30, 18), start, end) == 0.5
    assert hour_share(utc(2026, 11, 30, 19), start, end) == 0.0
    every = range(*ledger_span(start, end), 3600)
    assert hours_with_data(every, start, end) == 720
    # Without the month's first UTC hour, its first local hour (half in it) has no data.
    assert hours_with_data(every[1:], start, end) == 719


def test_a_zone_named_in_another_case_is_taken_where_only_one_matches():
    assert zone_name("utc") == zone_name("UTC") == "UTC"
    assert zone_name("europe/berlin") == "Europe/Berlin"
    assert month_span("2026-03", "utc") == month_span("2026-03", "UTC")
    with pytest.raises(ReportError, match="'Europe/Berln' is not an IANA time zone"):
        zone_name("Europe/Berln")


def test_an_unknown_zone_is_refused_naming_it():
    with pytest.raises(ReportError, match="'Europe/Berln' is not an IANA time zone"):
        month_span("2026-03", "Europe/Berln")
    with pytest.raises(config.ConfigError, match=r"energy.timezone = 'Mars/Olympus'; not an "
                                                 "IANA time zone name"):
        config.load(None, env={"FLEETWATCH_ENERGY_TIMEZONE": "Mars/Olympus"})
    assert config.load(None, env={}).energy.timezone == "UTC"
    assert config.load(None, env={"FLEETWATCH_ENERGY_TIMEZONE": "Asia/Tokyo"}
                       ).energy.timezone == "Asia/Tokyo"


# Energy in the hours between the UTC and the local ends of Berlin's March 2026, and inside.
BEFORE = utc(2026, 2, 28, 23)   # Berlin's March, not UTC's
INSIDE = utc(2026, 3, 15, 12)   # both
AFTER = (utc(2026, 3, 31, 22), utc(2026, 3, 31, 23))   # UTC's March, not Berlin's (CEST)
EDGES = [row(BEFORE, 1.0), row(INSIDE, 10.0), row(AFTER[0], 100.0), row(AFTER[1], 1000.0)]


def _files(tmp_path, tz: str, store: SqliteStore, mdl=None) -> tuple[dict, list[dict], str]:
    paths = write_report(store, mdl or model(), "2026-03", tmp_path / tz.replace("/", "_"),
                         now=utc(2026, 4, 2), tz=tz)
    with paths["csv"].open(newline="") as f:
        rows = list(csv.DictReader(f))
    return json.loads(paths["json"].read_text()), rows, paths["html"].read_text()


def test_a_local_month_and_the_utc_month_differ_by_the_hours_between_their_ends(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    store.write_energy(EDGES, [])
    local, local_rows, page = _files(tmp_path, "Europe/Berlin", store)
    utc_month, utc_rows, utc_page = _files(tmp_path, "UTC", store)
    assert local["it_kwh"] == pytest.approx(1.0 + 10.0)
    assert utc_month["it_kwh"] == pytest.approx(10.0 + 100.0 + 1000.0)
    assert local["it_kwh"] - utc_month["it_kwh"] == pytest.approx(1.0 - 100.0 - 1000.0)
    assert local["co2e_kg"] == pytest.approx(11.0 * 0.4)
    # The files say the zone; times carry their offset.
    assert local["timezone"] == "Europe/Berlin" and utc_month["timezone"] == "UTC"
    assert (local["month_start"], local["month_end"]) == ("2026-03-01T00:00:00+01:00",
                                                          "2026-04-01T00:00:00+02:00")
    assert local["generated"] == "2026-04-02T02:00:00+02:00"
    assert {(r["timezone"], r["month_start"], r["month_end"]) for r in local_rows} == {
        ("Europe/Berlin", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00")}
    assert {r["month_start"] for r in utc_rows} == {"2026-03-01T00:00:00+00:00"}
    assert "Europe/Berlin" in page and "01 Mar 00:00 to 01 Apr 00:00 Europe/Berlin" in page
    assert "(743 hours)" in page and "(744 hours)" in utc_page
    assert [r for r in local_rows if r["kind"] == "user"][0]["it_kwh"] == "11.000000"


def test_the_days_are_local_days():
    r = build(EDGES, model(), *month_span("2026-03", "Europe/Berlin"), "2026-03",
              utc(2026, 4, 2), tz="Europe/Berlin")
    # Berlin's 1 March begins at 23:00 UTC on 28 February, and holds that hour.
    assert {d: v[0] for d, v in r.daily["sim"].items()} == {
        utc(2026, 2, 28, 23): pytest.approx(1.0), utc(2026, 3, 14, 23): pytest.approx(10.0)}


def test_a_half_hour_zone_takes_the_edge_hours_share(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    first, last = utc(2026, 10, 31, 18), utc(2026, 11, 30, 18)
    store.write_energy([row(first, 2.0), row(utc(2026, 11, 10), 5.0), row(last, 4.0),
                        row(last + 3600, 8.0)], [])
    paths = write_report(store, model(), "2026-11", tmp_path / "k", now=utc(2026, 12, 5),
                         tz="Asia/Kolkata")
    s = json.loads(paths["json"].read_text())
    assert s["it_kwh"] == pytest.approx(2.0 / 2 + 5.0 + 4.0 / 2)
    assert s["gpu_hours"] == pytest.approx(0.5 + 1.0 + 0.5)
    assert s["month_start"] == "2026-11-01T00:00:00+05:30"


def test_a_local_month_picks_the_grid_series_utc_hours(tmp_path):
    # The series is hourly in UTC: Berlin's first March hour is UTC's 28 Feb 23:00.
    series = tmp_path / "ci.csv"
    hours = [BEFORE, INSIDE, *AFTER]
    values = [100.0, 200.0, 300.0, 400.0]
    series.write_text("timestamp,avg_CI\n" + "".join(
        f"{utc_iso(h)},{v}\n" for h, v in zip(hours, values)))
    mdl = model(intensity_csv=str(series))
    r = build(EDGES, mdl, *month_span("2026-03", "Europe/Berlin"), "2026-03", utc(2026, 4, 2),
              tz="Europe/Berlin")
    assert [(h, ci) for h, ci, _ in r.hourly_intensity] == [(BEFORE, 100.0), (INSIDE, 200.0)]
    assert r.total.co2e_kg == pytest.approx((1.0 * 100.0 + 10.0 * 200.0) / 1000)
    u = build(EDGES, mdl, *month_span("2026-03"), "2026-03", utc(2026, 4, 2))
    assert [h for h, _, _ in u.hourly_intensity] == [INSIDE, *AFTER]


def utc_iso(ts: int) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat()


def _hourly(start: int, end: int, kwh: float = 1.0) -> list[EnergyRow]:
    first, last = ledger_span(start, end)
    return [row(h, kwh) for h in range(first, last, 3600)]


@pytest.mark.parametrize(("month", "hours"), [("2026-03", 743), ("2026-10", 745)])
def test_a_month_with_a_dst_change_has_its_hours(month, hours):
    start, end = month_span(month, "Europe/Berlin")
    r = build(_hourly(start, end), model(), start, end, month, end + 60, tz="Europe/Berlin")
    assert (r.hours_so_far, r.hours_with_data, r.status) == (hours, hours, "complete")
    assert r.total.it_kwh == pytest.approx(hours)
    # Mid-month, at 1 kWh an hour, the projection is the month's hours.
    now = start + 200 * 3600
    mid = build(_hourly(start, now), model(), start, end, month, now, tz="Europe/Berlin")
    assert (mid.hours_so_far, mid.hours_with_data) == (200, 200)
    assert mid.projected_co2e_kg == pytest.approx(hours * 0.4)
    assert "of the month's first 200 hours" in mid.coverage()
    assert "Europe/Berlin" in mid.coverage()


def test_cli_report_tz_names_the_zone_and_refuses_an_unknown_one(tmp_path, capsys):
    from fleetwatch.cli import main

    db = SqliteStore(tmp_path / "s.db")
    db.write_energy(EDGES, [])
    db.close()
    conf = tmp_path / "c.toml"
    conf.write_text('[carbon]\nintensity_g_per_kwh = 400.0\npue = 1.0\n'
                    '[energy]\ntimezone = "Asia/Tokyo"\n')
    args = ["--config", str(conf), "report", "--month", "2026-03", "--store",
            str(tmp_path / "s.db"), "--out", str(tmp_path / "out")]
    assert main([*args, "--tz", "Europe/Berlin"]) == 0
    out = capsys.readouterr().out
    assert "2026-03 (Europe/Berlin): 4.40 kg CO2e" in out
    # Without --tz, energy.timezone: Tokyo's March (15:00 UTC on 28 Feb to 15:00 UTC on 31 Mar)
    # holds the same two hours.
    assert main(args) == 0
    assert "2026-03 (Asia/Tokyo): 4.40 kg CO2e" in capsys.readouterr().out
    # A usage error, as other flags' (exit 2), not a failed run (1).
    assert main([*args, "--tz", "Berlin"]) == 2
    assert ("fleetwatch report: --tz: time zone 'Berlin' is not an IANA time zone name"
            in capsys.readouterr().err)
    assert main([*args, "--tz", "europe/berlin"]) == 0
    assert "2026-03 (Europe/Berlin): 4.40 kg CO2e" in capsys.readouterr().out
    # Another zone than energy.timezone's: its files beside the configured zone's, not over.
    with (tmp_path / "out" / "fleetwatch-energy-2026-03-Europe_Berlin.csv").open() as f:
        assert {row["timezone"] for row in csv.DictReader(f)} == {"Europe/Berlin"}
    with (tmp_path / "out" / "fleetwatch-energy-2026-03.csv").open() as f:
        assert {row["timezone"] for row in csv.DictReader(f)} == {"Asia/Tokyo"}


@pytest.mark.parametrize("tz", ["Etc/GMT+12", "America/Los_Angeles", "America/Denver",
                                "America/New_York", "UTC", "Asia/Kolkata",
                                "Pacific/Kiritimati"])
def test_the_shipped_schedule_names_the_month_that_just_ended_in_every_zone(tz):
    from datetime import datetime
    from pathlib import Path

    from fleetwatch.report_month import resolve_month

    root = Path(__file__).resolve().parents[2] / "deploy"
    assert "OnCalendar=*-*-01 14:00:00 UTC" in (
        root / "systemd" / "fleetwatch-report.timer").read_text()
    assert 'schedule: "0 14 1 * *"' in (root / "kubernetes" / "fleetwatch.yaml").read_text()
    for first in ("2023-01-01", "2022-07-01", "2022-03-01"):
        at = datetime.fromisoformat(f"{first}T14:00:00+00:00").timestamp()
        ended = datetime.fromisoformat(f"{first}T00:00:00").replace(day=1)
        just = f"{ended.year - (ended.month == 1):04d}-{(ended.month - 2) % 12 + 1:02d}"
        assert resolve_month("previous", at, tz) == just
        assert month_span(just, tz)[1] <= at  # it has ended there
