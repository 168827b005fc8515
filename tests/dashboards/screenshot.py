"""Make ``docs/screenshot.png`` from a real running dashboard in headless Chromium.

    .venv/bin/python -m tests.dashboards.screenshot docs/screenshot.png

A simulated fleet (8 nodes in 4 racks, every GPU busy) runs for 30 minutes
into a temporary SQLite store, node-001 GPU 3 losing its cooling a minute in;
``serve`` runs the dashboard over a read-only handle on that file, and the
shot is taken with the pointer on the hot GPU so its tooltip shows.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from dash.testing.wait import until
from selenium import webdriver
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from fleetwatch.collectors.sim import FleetSim, SimParams, parse_fault
from fleetwatch.dashboards import serve
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.simulate import fault_annotations
from tests.dashboards.conftest import FAULT, INTERVAL_S, STEPS, pytest_setup_options
from tests.servers import free_port, wait_port

WIDTH, HEIGHT = 1400, 900
NODES = 8


def fill(path: Path) -> None:
    store = SqliteStore(path)
    params = SimParams(nodes=NODES, gpus=8, interval_s=INTERVAL_S, job_mean_s=1e9,
                       idle_mean_s=1, busy_at_start=1.0, steady_load=True)
    sim = FleetSim(params, start_ts=time.time() - STEPS * INTERVAL_S, faults=[parse_fault(FAULT)])
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=60)])
    for _ in range(STEPS):
        sim.step()
        processor.process(sim.frames())
    store.write_annotations(fault_annotations(sim.ground_truth, params.cluster))
    store.close()


def shoot(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "fleet.db"
        fill(db)
        port = free_port()
        threading.Thread(target=serve, args=(SqliteStore(db, read_only=True),),
                         kwargs={"port": port, "refresh_s": 5.0}, daemon=True).start()
        wait_port(port)
        driver = webdriver.Chrome(options=pytest_setup_options())
        try:
            # The exact viewport, whatever the window decorations of this Chromium.
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                "width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
            driver.get(f"http://127.0.0.1:{port}/")
            until(lambda: driver.find_elements(By.CSS_SELECTOR, "#active-alerts tr.alert-row"),
                  timeout=15)
            until(lambda: driver.find_elements(By.CSS_SELECTOR, "#fleet-heatmap .hm"), timeout=15)
            hover_hot_gpu(driver)
            time.sleep(0.5)
            out.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(out))
        finally:
            driver.quit()


def hover_hot_gpu(driver: webdriver.Chrome) -> None:
    """Point at node-001 GPU 3: row 2 of NODES, column 4 of 8 on the heatmap's plot area."""
    drag = driver.find_element(By.CSS_SELECTOR, "#fleet-heatmap .nsewdrag")
    w, h = drag.size["width"], drag.size["height"]
    # From the element's centre: the one origin every Selenium 4 release agrees on.
    ActionChains(driver).move_to_element(drag).move_by_offset(
        int(w * 3.5 / 8 - w / 2), int(h * 1.5 / NODES - h / 2)).perform()


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot.png")
    shoot(target)
    print(f"wrote {target}")
