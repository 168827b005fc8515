"""The carbon model: exact CO2e for known energy, hourly series with holes, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.carbon import (
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
    ("when,avg_CI\n2022-01-01,1\n", "needs columns 'timestamp'"),
    ("timestamp,avg_CI\nyesterday,1\n", ":2: timestamp 'yesterday'"),
    ("timestamp,avg_CI\n2022-01-01 00:00,abc\n", ":2: avg_CI 'abc' is not a number"),
    ("timestamp,avg_CI\n2022-01-01 00:00,-5\n", "must be finite and >= 0"),
    ("timestamp,avg_CI\n2022-01-01 00:00,nan\n", "must be finite"),
])
def test_bad_series_files_are_refused_with_the_line(tmp_path, text, message):
    p = tmp_path / "ci.csv"
    p.write_text(text)
    with pytest.raises(CarbonDataError, match=message):
        read_hourly_csv(p, "avg_CI")


def test_a_missing_file_names_the_path(tmp_path):
    with pytest.raises(CarbonDataError, match="cannot read"):
        build_model("USA", 0.0, str(tmp_path / "nope.csv"), "avg_CI", 1.2, "", "pue", 0, "USD")
