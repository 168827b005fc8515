"""The energy page's charts with under an hour of data, its tiles and its warnings."""

from __future__ import annotations

import calendar
import dataclasses
from pathlib import Path

from fleetwatch.carbon import build_model
from fleetwatch.dashboards import energy, energy_figures
from fleetwatch.dashboards.energy_data import energy_view, series_warning
from fleetwatch.pipeline.store.ledger import EnergyTotal
from tests.dashboards.test_data import text_of

CISO = Path(__file__).resolve().parents[1] / "data" / "carbon" / "eia_hourly_2022_CISO.csv"
H = calendar.timegm((2026, 11, 26, 16, 0, 0))


def test_one_hour_of_data_is_one_hour_wide_bar_labelled_with_its_hour() -> None:
    fig = energy_figures.per_hour([H], {"sim": [1.8]}, "kWh per hour")
    (bar,) = fig.data
    assert bar.width == 3600 * 1000 * 0.9
    assert list(bar.customdata) == ["16:00–17:00 UTC"]
    start, end = fig.layout.xaxis.range
    assert (str(start), str(end)) == ("2026-11-26 16:00:00", "2026-11-26 17:00:00")


def test_day_bins_are_labelled_with_their_day() -> None:
    fig = energy_figures.per_hour([H - 16 * 3600], {"sim": [40.0]}, "kWh per day", step=86400)
    assert list(fig.data[0].customdata) == ["26 Nov UTC"]


def _view(over_tdp_s: float):
    model = build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0.10, "USD")
    t = EnergyTotal(H, "sim", 3.6e6, 0.0, 3.0e6, 3600.0 * 8, 0.0, 0.0, over_tdp_s)
    return energy_view([t], [t], (), (), model, H + 1800)


def test_small_gpu_hours_above_tdp_are_not_rounded_to_zero() -> None:
    tiles = {t.id: text_of(t) for t in energy.summary(_view(0.29 * 3600))}
    assert "0.290 · 0" in tiles["energy-quality"]


def test_the_in_range_tile_says_it_counts_whole_hours() -> None:
    tiles = {t.id: text_of(t) for t in energy.summary(_view(0.0))}
    assert "1 whole hour" in tiles["energy-inrange"]
    two = dataclasses.replace(_view(0.0), hours=(H - 3600, H))
    assert "2 whole hours" in text_of(energy.summary(two)[3])


def test_a_carbon_series_that_misses_the_hours_is_a_warning() -> None:
    csv_model = build_model("USA", 369.473, str(CISO), "avg_CI", 1.2, "", "pue", 0.10, "USD")
    warning = series_warning(csv_model, [H, H + 3600])
    assert warning.startswith("2 of 2 hours use the fallback intensity 369.473")
    assert "carbon.intensity_csv" in warning
    plain = build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0.10, "USD")
    assert series_warning(plain, [H]) == ""


def test_the_energy_page_prices_each_cluster_with_its_own_grid() -> None:
    import dataclasses as dc

    eu = build_model("FRA", 50.0, "", "avg_CI", 1.1, "", "pue", 0.10, "USD")
    model = dc.replace(build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0.10, "USD"),
                       clusters={"c-eu": eu})
    ts = [EnergyTotal(H, c, 3.6e6, 0.0, 3.0e6, 3600.0, 0.0, 0.0, 0.0) for c in ("c-us", "c-eu")]
    v = energy_view(ts, ts, (), (), model, H + 1800)
    assert v.co2e_by_cluster == {"c-us": [1.2 * 0.4], "c-eu": [1.1 * 0.05]}
    assert v.month_co2e_kg == 1.2 * 0.4 + 1.1 * 0.05
    assert {s.name: s.co2e_kg for s in v.clusters} == {"c-us": 1.2 * 0.4, "c-eu": 1.1 * 0.05}
    note = energy.method_note(model)
    assert "Cluster c-eu: grid intensity 50 gCO2e/kWh" in note


def test_the_tiles_say_it_energy_and_show_facility_energy_beside_it() -> None:
    """The Today and In range kWh were IT energy without saying so, and facility energy
    (what the report leads with, and a facility meter reads) was nowhere on the page."""
    tiles = {t.id: text_of(t) for t in energy.summary(_view(0.0))}
    # 1 kWh of IT energy at PUE 1.2.
    for tile in ("energy-today", "energy-month", "energy-inrange"):
        assert "1.00 kWh IT" in tiles[tile], tiles[tile]
        assert "1.20 kWh facility (x PUE)" in tiles[tile], tiles[tile]


def test_refused_carbon_settings_show_co2e_unknown_and_say_why(tmp_path: Path) -> None:
    """A carbon setting fleetwatch refuses (an intensity in kg/kWh, a grid file without
    zone) leaves CO2e unknown on the page, with the reason, instead of stopping `up`."""
    import dash

    from fleetwatch.carbon import unknown_model
    from fleetwatch.config import EnergyConfig
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    model = unknown_model("carbon.intensity_g_per_kwh = 0.42: did you mean kg/kWh?",
                          EnergyConfig())
    ts = [EnergyTotal(H, "c1", 3.6e6, 0.0, 3.0e6, 3600.0, 0.0, 0.0, 0.0)]
    tiles = {t.id: text_of(t) for t in energy.summary(energy_view(ts, ts, (), (), model,
                                                                   H + 1800))}
    assert "CO2e unknown" in tiles["energy-month"] and "1.00 kWh IT" in tiles["energy-month"]
    assert "nan" not in " ".join(tiles.values())
    render = energy.register(dash.Dash(__name__), SqliteStore(tmp_path / "s.db"),
                             lambda: H + 1800, model)
    shown = text_of(render("24h")[6])
    assert "CO2e unknown: carbon.intensity_g_per_kwh = 0.42: did you mean kg/kWh?" in shown
