"""The carbon model: exact CO2e for known energy, hourly series with holes, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.carbon import (
    INTENSITY_RANGE,
    PUE_RANGE,
    CarbonDataError,
    CarbonModel,
    HourlySeries,
    build_model,
    country_intensity,
    read_hourly_csv,
)

DATA = Path(__file__).resolve().parents[1] / "data"
CISO = DATA / "carbon" / "eia_hourly_2022_CISO.csv"


def test_constant_model_gives_exact_co2e():
    model = build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.2, "EUR")
    # 10 kWh of IT energy: 15 facility kWh at 400 g/kWh = 6,000 g.
    assert model.co2e_g(10 * 3.6e6, 0) == pytest.approx(6000.0)
    assert "400 gCO2e/kWh (site constant)" in model.intensity_source


def test_country_default_comes_from_codecarbon_table():
    value, source = country_intensity("fra")
    assert value == pytest.approx(56.039)
    assert "France" in source and "CodeCarbon" in source
    with pytest.raises(CarbonDataError, match="ISO 3166-1 alpha-3"):
        country_intensity("XXX")


def test_eia_series_reads_and_fills_its_empty_hours():
    series = read_hourly_csv(CISO, "avg_CI")
    # 2022 has 8760 hours; the file has 3 empty ones (e.g. 2022-05-17 18:00 UTC).
    assert len(series.values) == 8760 - 3
    hole = 1652810400  # 2022-05-17 18:00 UTC
    assert hole not in series.values
    value, filled = series.at(hole)
    before, after = series.values[hole - 3600], series.values[hole + 3600]
    assert filled and value == pytest.approx((before + after) / 2)
    assert series.at(hole - 3600) == (before, False)


def test_a_long_hole_takes_the_fallback_and_says_so():
    series = HourlySeries({0: 100.0, 20 * 3600: 300.0}, "t")
    model = CarbonModel(250.0, "fallback", 1.0, "1", intensity=series)
    f = model.hour(10 * 3600)
    assert f.intensity_g_per_kwh == 250.0 and f.intensity_filled
    assert model.hour(0).intensity_filled is False


@pytest.mark.parametrize("text, message", [
    ("when,avg_CI\n2022-01-01,1\n", "needs a time column \\('timestamp', or one whose name"),
    ("timestamp,avg_CI\nyesterday,1\n", ":2: timestamp 'yesterday'"),
    ("timestamp,avg_CI\n2022-01-01 00:00Z,abc\n", ":2: avg_CI 'abc' is not a number"),
    ("timestamp,avg_CI\n2022-01-01 00:00Z,-5\n", "must be finite and >= 0"),
    ("timestamp,avg_CI\n2022-01-01 00:00Z,nan\n", "must be finite"),
])
def test_bad_series_files_are_refused_with_the_line(tmp_path, text, message):
    p = tmp_path / "ci.csv"
    p.write_text(text)
    with pytest.raises(CarbonDataError, match=message):
        read_hourly_csv(p, "avg_CI")


def test_a_missing_file_names_the_path(tmp_path):
    with pytest.raises(CarbonDataError, match="cannot read"):
        build_model("USA", 0.0, str(tmp_path / "nope.csv"), "avg_CI", 1.2, "", "pue", 0, "USD")


MAY1 = 1651363200  # 2022-05-01 00:00 UTC


def csv_file(tmp_path: Path, column: str, rows: list[tuple[str, str]]) -> Path:
    p = tmp_path / f"{column}.csv"
    # Times in UTC, with their offset: a time without one is refused unless its zone is
    # declared (test_carbon_units.py).
    p.write_text(f"timestamp,{column}\n" + "".join(
        f"{t}{'' if '+' in t else '+00:00'},{v}\n" for t, v in rows))
    return p


def test_rows_within_an_hour_are_averaged(tmp_path):
    # A half-hourly grid series: 100 at :00 and 1000 at :30 is a 550 g/kWh hour, not 1000.
    p = csv_file(tmp_path, "avg_CI", [("2022-05-01 00:00", "100"), ("2022-05-01 00:30", "1000"),
                                      ("2022-05-01 01:00", "200"), ("2022-05-01 01:15", ""),
                                      ("2022-05-01 01:30", "400")])
    series = read_hourly_csv(p, "avg_CI")
    # An empty row is a hole, not a zero: the second hour is the mean of its two values.
    assert series.values == {MAY1: pytest.approx(550.0), MAY1 + 3600: pytest.approx(300.0)}
    model = build_model("USA", 400.0, str(p), "avg_CI", 1.0, "", "pue", 0, "USD")
    assert model.co2e_g(3.6e6, MAY1) == pytest.approx(550.0)


def test_the_same_instant_twice_names_both_lines(tmp_path):
    # The same instant written two ways (a file concatenated with its re-export).
    p = csv_file(tmp_path, "avg_CI", [("2022-05-01 00:00", "100"), ("2022-05-01 01:00", "120"),
                                      ("2022-05-01T00:00:00+00:00", "100")])
    with pytest.raises(CarbonDataError, match=r"avg_CI\.csv:4: timestamp "
                       r"'2022-05-01T00:00:00\+00:00' is the same instant as line 2"):
        read_hourly_csv(p, "avg_CI")


def test_series_ranges_are_the_configs():
    # The ranges come from CarbonConfig, so a file and the constant are held to one rule.
    assert PUE_RANGE == (1.0, 10.0)
    assert INTENSITY_RANGE == (0.0, 10_000.0)


@pytest.mark.parametrize("series, column, value, line, message", [
    ("pue", "pue", "0", 3, "between 1 and 10"),
    ("pue", "pue", "12.5", 3, "between 1 and 10"),
    ("intensity", "avg_CI", "1e9", 3, "between 0 and 10000"),
    ("intensity", "avg_CI", "-1", 3, "between 0 and 10000"),
])
def test_a_series_value_outside_the_configs_range_is_refused(tmp_path, series, column, value,
                                                             line, message):
    good = "1.3" if series == "pue" else "300"
    p = csv_file(tmp_path, column, [("2022-05-01 00:00", good), ("2022-05-01 01:00", value)])
    ci_csv, pue_csv = ("", str(p)) if series == "pue" else (str(p), "")
    with pytest.raises(CarbonDataError) as err:
        build_model("USA", 400.0, ci_csv, "avg_CI", 1.2, pue_csv, "pue", 0, "USD")
    text = str(err.value)
    assert f"{p}:{line}: {column} {value!r} must be finite and {message}" in text


def test_an_intensity_series_in_kg_per_kwh_is_refused(tmp_path):
    p = csv_file(tmp_path, "avg_CI", [("2022-05-01 00:00", "0.4"), ("2022-05-01 01:00", ""),
                                      ("2022-05-01 02:00", "0.25")])
    with pytest.raises(CarbonDataError, match=r"names no unit, and read as gCO2e/kWh every "
                       r"hour is under 1 \(the largest is 0\.4\): is the column in kg/kWh\? "
                       r"multiply it by 1000"):
        build_model("USA", 400.0, str(p), "avg_CI", 1.2, "", "pue", 0, "USD")
    # One hour under 1 g/kWh beside real ones (a windy night on a small grid) is kept.
    q = csv_file(tmp_path, "avg_CI", [("2022-05-01 00:00", "0.4"), ("2022-05-01 01:00", "250")])
    model = build_model("USA", 400.0, str(q), "avg_CI", 1.2, "", "pue", 0, "USD")
    assert model.hour(MAY1).intensity_g_per_kwh == pytest.approx(0.4)


def test_hours_a_series_does_not_cover_are_marked_as_from_the_fallback(tmp_path):
    # A January series and a May ledger: every May hour takes the constant, and says so
    # apart from an interpolated hole (which is filled but still from the series).
    jan = csv_file(tmp_path, "avg_CI", [("2022-01-01 00:00", "300"), ("2022-01-01 02:00", "500")])
    pue = csv_file(tmp_path, "pue", [("2022-01-01 00:00", "1.4")])
    model = build_model("USA", 400.0, str(jan), "avg_CI", 1.2, str(pue), "pue", 0, "USD")
    may = model.hour(MAY1)
    assert (may.intensity_g_per_kwh, may.pue) == (400.0, 1.2)
    assert may.intensity_filled and may.intensity_from_fallback
    assert may.pue_filled and may.pue_from_fallback
    hole = model.hour(1640995200 + 3600)  # 2022-01-01 01:00, between 300 and 500
    assert hole.intensity_g_per_kwh == pytest.approx(400.0)
    assert hole.intensity_filled and not hole.intensity_from_fallback
    assert not model.hour(1640995200).intensity_from_fallback
    assert model.intensity is not None
    assert model.intensity.span() == (1640995200, 1640995200 + 7200)
    # A constant is never "from the fallback": there is no series to miss.
    constant = build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0, "USD").hour(MAY1)
    assert not (constant.intensity_from_fallback or constant.pue_from_fallback)
