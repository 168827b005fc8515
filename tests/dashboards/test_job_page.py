"""The job page in headless Chromium over a simulated fleet: a researcher with only a job id
finds the job, its GPUs side by side with the hot one first, its alert and its energy; an id
the store never saw says so and draws nothing."""

from __future__ import annotations

import time

import pytest
from dash.testing.wait import until
from selenium.webdriver.common.keys import Keys

from fleetwatch.dashboards import create_app
from fleetwatch.dashboards.job_data import read_current_jobs
from tests.dashboards.conftest import HOT, SimFleet
from tests.dashboards.test_browser import alert_rows, click, retry_stale, texts
from tests.dashboards.test_ranges import _pick

pytestmark = pytest.mark.browser
HOT_NODE, HOT_GPU = HOT
_GPU_ROWS_JS = """return Array.from(document.querySelectorAll('#job-gpu-table tr.job-gpu-row'))
    .map(r => [r.dataset.node, r.dataset.gpu]);"""


def test_a_job_id_typed_on_the_fleet_page_opens_its_gpus_alert_and_energy(
        dash_duo, sim_fleet: SimFleet) -> None:
    # The hot GPU's job, as the store's job events name it (the simulator gives the ids).
    job = read_current_jobs(sim_fleet.store, HOT_NODE, time.time())[HOT_GPU]
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0))
    box = dash_duo.wait_for_element("#find-job-input", timeout=10)
    retry_stale(lambda: box.send_keys(job, Keys.ENTER))
    dash_duo.wait_for_text_to_equal("#job-title", job, timeout=10)
    dash_duo.wait_for_element("#job-gpu-table tr.job-gpu-row", timeout=15)
    assert dash_duo.driver.current_url.endswith(f"/job/{job}")
    # Its 8 GPUs, all on the hot node; the hot GPU furthest off the job's median, first.
    rows = dash_duo.driver.execute_script(_GPU_ROWS_JS)
    assert len(rows) == 8 and {r[0] for r in rows} == {HOT_NODE}
    assert rows[0] == [HOT_NODE, str(HOT_GPU)]
    for metric in ("gpu_sm_active_ratio", "gpu_power_w", "gpu_temp_c", "gpu_sm_clock_mhz"):
        dash_duo.wait_for_element(f"#job-graph-{metric} .scatterlayer .trace")
        assert len(texts(dash_duo, f"#job-graph-{metric} .scatterlayer .trace")) == 8, metric
    assert texts(dash_duo, "#job-state-tile .tile-value") == ["running"]
    assert texts(dash_duo, "#job-gpus-tile .tile-value") == ["8"]
    # Whom it belongs to, as the simulated scheduler named them: user and team.
    owner = texts(dash_duo, "#job-owner")[0].strip()
    assert owner.startswith("· user-") and " · team " in owner, owner
    assert texts(dash_duo, "#job-energy-tile .tile-value")[0].endswith("Wh")  # kWh, Wh: short
    # A range from the usual ones ends where the job ended (now: it runs), in the address.
    assert texts(dash_duo, "#job-hint-gpu_power_w") == ["W · the job's span · UTC"]
    _pick(dash_duo, "job-range", "6h")
    until(lambda: dash_duo.driver.current_url.endswith(f"/job/{job}?range=6h"), timeout=10)
    dash_duo.wait_for_text_to_equal("#job-hint-gpu_power_w", "W · the job's last 6 h · UTC",
                                    timeout=10)
    # The hot GPU's alert, linked to its node page; from there the GPU's job links back.
    assert alert_rows(dash_duo, "#job-alert-table") == [(HOT_NODE, f"gpu{HOT_GPU}", "firing")]
    click(dash_duo, "#job-alert-table a.node-link")
    dash_duo.wait_for_contains_text("#node-title", HOT_NODE, timeout=10)
    assert f"/node/{HOT_NODE}?cluster=sim&gpu={HOT_GPU}" in dash_duo.driver.current_url
    dash_duo.wait_for_element("#node-jobs a.job-link", timeout=10)
    assert texts(dash_duo, "#node-jobs a.job-link") == [f"job {job}"]
    click(dash_duo, "#node-jobs a.job-link")
    dash_duo.wait_for_text_to_equal("#job-title", job, timeout=10)
    assert dash_duo.get_logs() == []


def test_an_unknown_job_id_says_so_and_draws_nothing(dash_duo, sim_fleet: SimFleet) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0))
    dash_duo.driver.get(dash_duo.server_url + "/job/no-such-job")
    dash_duo.wait_for_contains_text("#job-not-found", "No job no-such-job", timeout=10)
    assert until(lambda: not dash_duo.find_element("#job-body").is_displayed(), 5)
    assert texts(dash_duo, "#job-gpu-table tr.job-gpu-row") == []
    assert texts(dash_duo, "#job-choice-list") == []
    assert dash_duo.get_logs() == []
