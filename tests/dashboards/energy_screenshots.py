"""Make ``docs/energy.png`` and ``docs/utilization.png`` from the running dashboard.

    .venv/bin/python -m tests.dashboards.energy_screenshots docs

Two days of a simulated fleet of two clusters (``energy_fleet.fill``) into a temporary
SQLite store; ``serve`` over a read-only handle; headless Chromium takes the pages.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from dash.testing.wait import until
from selenium import webdriver
from selenium.webdriver.common.by import By

from fleetwatch.dashboards import serve
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.conftest import pytest_setup_options
from tests.dashboards.energy_fleet import fill
from tests.servers import free_port, wait_port

SHOTS = (("energy.png", "/energy?range=7d", "#energy-kwh .bars", 1400, 1250),
         ("utilization.png", "/utilization?range=24h", "#util-cdf-gpu_power_w .scatterlayer",
          1400, 1100))


def shoot(out_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "fleet.db"
        fill(db)
        port = free_port()
        threading.Thread(target=serve, args=(SqliteStore(db, read_only=True),),
                         kwargs={"port": port}, daemon=True).start()
        wait_port(port)
        driver = webdriver.Chrome(options=pytest_setup_options())
        try:
            for name, path, ready, width, height in SHOTS:
                driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                    "width": width, "height": height, "deviceScaleFactor": 1,
                    "mobile": False})
                driver.get(f"http://127.0.0.1:{port}{path}")
                until(lambda sel=ready: driver.find_elements(By.CSS_SELECTOR, sel), timeout=30)
                time.sleep(1.5)
                out_dir.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(out_dir / name))
        finally:
            driver.quit()


if __name__ == "__main__":
    shoot(Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))
