"""EIA-930 files (the US grid operators' hourly data) write their times as
``05/04/2022 1:00:00 AM``: month/day/year, a 12-hour clock, stamped at the hour's END, in
a column named "UTC Time at End of Hour" (beside "Local Time at End of Hour"). That form is
read only from those columns, where EIA fixes the order; anywhere else 05/04 could be the
5th of April or the 4th of May, so it is refused, naming the row and the forms read."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.carbon import CarbonDataError, build_model
from fleetwatch.cli import main

from .test_report import one_gpu_hour

MAY1 = 1651363200  # 2022-05-01 00:00 UTC
MAY4 = MAY1 + 3 * 86400
HEADER = ('"Balancing Authority","Data Date","Hour Number","Local Time at End of Hour",'
          '"UTC Time at End of Hour","Demand (MW)",avg_CI')


def eia(tmp_path: Path, rows: list[tuple[str, str, str]]) -> Path:
    """A CISO extract of EIA-930's balance file with an intensity column: (local, UTC,
    value) rows, hour-ending, as EIA writes them (quoted, thousands separators)."""
    p = tmp_path / "EIA930_BALANCE_2022_Jan_Jun.csv"
    lines = [HEADER] + [f'"CISO","{local[:10]}","1","{local}","{utc}","25,432",{value}'
                        for local, utc, value in rows]
    p.write_text("\n".join(lines) + "\n", "utf-8")
    return p


def test_eia_utc_hour_ending_times_are_read_as_the_hour_before(tmp_path):
    p = eia(tmp_path, [("04/30/2022 6:00:00 PM", "05/01/2022 1:00:00 AM", "300"),
                       ("04/30/2022 7:00:00 PM", "05/01/2022 2:00:00 AM", "310"),
                       ("05/01/2022 5:00:00 AM", "05/01/2022 12:00:00 PM", "320"),
                       ("05/01/2022 4:00:00 PM", "05/01/2022 11:00:00 PM", "330"),
                       ("05/01/2022 5:00:00 PM", "05/02/2022 12:00:00 AM", "340")])
    model = build_model("USA", 0.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD")
    assert model.intensity is not None
    # Each row stands for the hour that ENDS at its UTC time; 12 AM is midnight, 12 PM noon.
    assert model.intensity.values == {MAY1: 300.0, MAY1 + 3600: 310.0,
                                      MAY1 + 11 * 3600: 320.0, MAY1 + 22 * 3600: 330.0,
                                      MAY1 + 23 * 3600: 340.0}
    # The column says UTC: a zone declared for the file's naive times does not shift it.
    zoned = build_model("USA", 0.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD",
                        intensity_zone="America/Los_Angeles")
    assert zoned.intensity is not None and zoned.intensity.values == model.intensity.values


def test_the_us_form_outside_eia_columns_is_refused_naming_row_and_forms(tmp_path):
    p = tmp_path / "grid.csv"
    p.write_text("timestamp,avg_CI\n2022-05-01 00:00:00+00:00,300\n"
                 "05/01/2022 1:00:00 AM,310\n", "utf-8")
    for zone in ("", "America/Los_Angeles"):
        with pytest.raises(CarbonDataError) as err:
            build_model("USA", 0.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD",
                        intensity_zone=zone)
        text = str(err.value)
        assert text.startswith(f"{p}:3: timestamp '05/01/2022 1:00:00 AM' is not ISO 8601")
        assert "month/day/year" in text and "UTC Time at End of Hour" in text


@pytest.mark.parametrize("raw", ["13/05/2022 1:00:00 AM", "05/01/2022 13:00:00 PM",
                                 "05/01/2022 01:00", "1 May 2022 1:00 AM"])
def test_an_eia_time_in_another_form_is_refused_naming_the_row(tmp_path, raw):
    # (ISO 8601 stays read there too: a file someone converted.)
    p = eia(tmp_path, [("04/30/2022 6:00:00 PM", "05/01/2022 1:00:00 AM", "300"),
                       ("x", raw, "310")])
    with pytest.raises(CarbonDataError) as err:
        build_model("USA", 0.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD")
    assert str(err.value).startswith(
        f"{p}:3: UTC Time at End of Hour {raw!r} is not EIA-930's form "
        "'MM/DD/YYYY H:MM:SS AM' (month/day/year, 12-hour clock")


def test_the_monthly_report_prices_eia_hours_as_by_hand(tmp_path, capsys):
    # 1000 W for the hour from 2022-05-04 00:00 UTC: 1 kWh IT.
    db, conf = one_gpu_hour(tmp_path, MAY4, 1000.0)
    p = eia(tmp_path, [("05/03/2022 5:00:00 PM", "05/04/2022 12:00:00 AM", "900"),
                       ("05/03/2022 6:00:00 PM", "05/04/2022 1:00:00 AM", "300"),
                       ("05/03/2022 7:00:00 PM", "05/04/2022 2:00:00 AM", "900")])
    conf.write_text(f'[carbon]\nintensity_csv = "{p}"\npue = 1.5\n')
    assert main(["--config", str(conf), "report", "--month", "2022-05", "--store", str(db),
                 "--out", str(tmp_path / "out")]) == 0
    # By hand: 1 kWh x PUE 1.5 x 300 g/kWh (the row ending at 01:00 UTC) = 450 g; the rows
    # either side (900) would give 1.35 kg.
    assert capsys.readouterr().out.startswith("2022-05: 0.450 kg CO2e, 1.50 kWh facility")
    csv_text = next((tmp_path / "out").glob("*.csv")).read_text("utf-8")
    assert "450" in csv_text


def test_a_file_of_several_balancing_authorities_says_so(tmp_path):
    p = eia(tmp_path, [("04/30/2022 6:00:00 PM", "05/01/2022 1:00:00 AM", "300")])
    p.write_text(p.read_text("utf-8") + '"ERCO","04/30/2022","1","04/30/2022 8:00:00 PM",'
                 '"05/01/2022 1:00:00 AM","45,000",400\n', "utf-8")
    with pytest.raises(CarbonDataError) as err:
        build_model("USA", 0.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD")
    assert str(err.value) == (
        f"{p}:3: UTC Time at End of Hour '05/01/2022 1:00:00 AM' is the same instant as line "
        "2: the file holds several balancing authorities (CISO and ERCO): keep only the rows "
        "of your site's grid")
