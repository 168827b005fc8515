"""What the utilization and energy pages say of the time and GPUs they have no data for: an
hour without data is a gap beside a "no data" line, never 0 % idle (fully busy); the SM
activity CDF says how many GPUs it covers, and a GPU without SM activity says what it lacks;
a store that is not there says so instead of "Loading…"."""

from __future__ import annotations

from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import create_app, energy_figures, utilization
from fleetwatch.dashboards.app import _default_carbon
from fleetwatch.dashboards.energy_data import energy_view, hourly_idle
from fleetwatch.pipeline.store.ledger import EnergyTotal
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards import coverage_fleet as cf

H = cf.HOUR0


def total(hour: int, gpu_s: float, idle_s: float, missing_s: float, name: str = "c"
          ) -> EnergyTotal:
    return EnergyTotal(hour, name, gpu_s * 200, idle_s * 60, gpu_s * 200, gpu_s, idle_s,
                       missing_s, 0.0)


def test_an_hour_without_data_is_no_idle_share_and_all_missing() -> None:
    # 09:00 half idle; 10:00 silent (the ledger's missing seconds only); 11:00 no row at
    # all; 12:00 a quarter of the time missing.
    totals = [total(H, 7200, 3600, 0), total(H + 3600, 0, 0, 7200),
              total(H + 3 * 3600, 5400, 0, 1800)]
    got = hourly_idle(totals)
    assert got.hours == (H, H + 3600, H + 7200, H + 3 * 3600)
    assert got.idle["c"] == [0.5, None, None, 0.0]
    assert got.missing["c"] == [0.0, 1.0, 0.0, 0.25]
    assert got.missing_h["c"] == [0.0, 2.0, 0.0, 0.5]


def test_the_idle_chart_draws_a_gap_and_a_no_data_line() -> None:
    got = hourly_idle([total(H, 7200, 3600, 0), total(H + 3600, 0, 0, 7200),
                       total(H + 7200, 7200, 7200, 0)])
    fig = energy_figures.idle_share(got.hours, got.idle, missing=got.missing,
                                    missing_h=got.missing_h)
    idle, gone = fig.data
    assert list(idle.y) == [50.0, None, 100.0]  # not 0 % idle in the silent hour
    assert gone.name == "c: no data" and list(gone.y) == [0.0, 100.0, 0.0]
    assert list(gone.customdata) == [0.0, 2.0, 0.0] and "without data" in gone.hovertemplate
    # No missing time: no "no data" line.
    assert len(energy_figures.idle_share((H,), {"c": [0.5]}).data) == 1


def test_the_energy_pages_idle_share_leaves_a_silent_hour_unknown() -> None:
    window = [total(H, 7200, 3600, 0), total(H + 3600, 0, 0, 7200)]
    v = energy_view(window, window, (), (), _default_carbon(), H + 7200)
    assert v.idle.idle == {"all clusters": [0.5, None]}
    assert v.idle.missing == {"all clusters": [0.0, 1.0]}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    return cf.build(tmp_path_factory.mktemp("cov") / "cov.db")


def test_sm_activity_says_how_many_gpus_it_covers(store: SqliteStore) -> None:
    start, end = int(H * 1000), int(cf.NOW * 1000)
    read = utilization.cdf_samples(store, start, end, None, None)
    assert {n for _, n, _ in read.gpus[utilization.SM]} == {"n1"}
    note, empty = utilization.sm_coverage(read.gpus, None, None)
    assert note == " · from 2 of 4 GPUs; the others report none (no DCGM, no GPM)"
    assert empty == "No samples in this range"
    # One GPU of n2: no CDF of SM activity, and the panel says why, not "No samples".
    one = utilization.cdf_samples(store, start, end, "n2", 1)
    assert not any(len(v) for v in one.samples[utilization.SM].values())
    assert any(len(v) for v in one.samples["gpu_util_pct"].values())
    note, empty = utilization.sm_coverage(one.gpus, "n2", 1)
    assert note == "" and empty.startswith("GPU 1 of n2 reports no SM activity (no DCGM")
    assert "utilization, memory and power are drawn beside" in empty
    # A node of which every GPU reports it: no note.
    assert utilization.sm_coverage(utilization.cdf_samples(store, start, end, "n1", None)
                                   .gpus, "n1", None)[0] == ""


# -- in Chromium ---------------------------------------------------------------------------

_TRACES = """return Array.from(document.querySelector(arguments[0] + ' .js-plotly-plot').data,
    t => [t.name, t.y]);"""


def _text(dash_duo, selector: str) -> str:
    return " ".join(dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent);",
        selector))


@pytest.mark.browser
def test_a_silent_node_and_a_gpu_without_sm_activity_in_chromium(dash_duo, tmp_path: Path
                                                                 ) -> None:
    dash_duo.start_server(create_app(cf.build(tmp_path / "cov.db"), refresh_s=30.0,
                                     clock=lambda: cf.NOW))
    dash_duo.driver.get(dash_duo.server_url + "/utilization?range=6h&node=n2&gpu=1")
    until(lambda: "reports no SM activity" in _text(
        dash_duo, "#util-cdf-gpu_sm_active_ratio .annotation-text"), timeout=15)
    traces = dash_duo.driver.execute_script(_TRACES, "#util-idle")
    assert [name for name, _ in traces] == ["c", "c: no data"]
    assert traces[0][1] == [50, None, 50] and traces[1][1] == [0, 100, 0]
    dash_duo.driver.get(dash_duo.server_url + "/utilization?range=6h")
    dash_duo.wait_for_contains_text("#util-hint-gpu_sm_active_ratio", "from 2 of 4 GPUs",
                                    timeout=15)
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_no_store_file_says_so_instead_of_loading(dash_duo, tmp_path: Path) -> None:
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "absent.db", read_only=True),
                                     refresh_s=30.0))
    for page, graphs in (("/utilization", "#util-cdf-gpu_power_w, #util-idle"),
                         ("/energy", "#energy-kwh, #energy-idle"),
                         ("/facility", "#facility-inlet, #facility-die")):
        dash_duo.driver.get(dash_duo.server_url + page)
        until(lambda g=graphs: _text(dash_duo, f"{g.split(', ')[0]} .annotation-text")
              .startswith("Store unavailable"), timeout=15)
        shown = _text(dash_duo, ", ".join(f"{g} .annotation-text" for g in graphs.split(", ")))
        assert "Loading" not in shown and shown.count("Store unavailable") == 2, shown
    assert dash_duo.get_logs() == []
