"""A node and a job named with 200 characters (the decoder takes up to 256): their pages'
titles wrap inside the window, on a desktop and on a phone, and no page scrolls sideways."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.dashboards import components, create_app
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore

pytestmark = pytest.mark.browser
LONG = "node-" + "x" * 190 + "-long"  # 200 characters, no space to break at
JOB = "job-" + "y" * 192 + "-end"

_WIDTHS = """
const t = document.querySelector(arguments[0]).getBoundingClientRect();
const wide = [...document.querySelectorAll('body *')].filter(e =>
  e.getBoundingClientRect().right > document.documentElement.clientWidth + 1
  && !e.closest('.js-plotly-plot')).map(e => e.tagName + '#' + e.id + '.' + e.className)
  .slice(0, 8);
return {scroll: document.documentElement.scrollWidth, wide: wide,
        client: document.documentElement.clientWidth, title_right: t.right};
"""


def _view(dash_duo, width: int, height: int, mobile: bool) -> None:
    dash_duo.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})


def test_200_character_node_and_job_names_wrap_in_their_page_titles(dash_duo,
                                                                     tmp_path: Path) -> None:
    assert len(LONG) == len(JOB) == 200
    store = SqliteStore(tmp_path / "long.db")
    processor = Processor(store, [])
    now = time.time()
    for k in range(20):
        gpus = tuple(GpuReading(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3",
                                {"gpu_temp_c": 60.0 + i, "gpu_power_w": 400.0,
                                 "gpu_util_pct": 90.0}, job=JOB) for i in range(2))
        processor.process([Frame("c", "r1", LONG, now - 15 * (20 - k), gpus, HostReading())])
    processor.flush()
    store.close()
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "long.db", read_only=True),
                                     refresh_s=2.0))
    for width, height, mobile in ((1400, 900, False), (390, 844, True)):
        _view(dash_duo, width, height, mobile)
        for href, title, name in ((components.node_href(LONG, cluster="c"), "#node-title",
                                   LONG), (components.job_href(JOB, "c"), "#job-title", JOB)):
            dash_duo.driver.get(dash_duo.server_url + href)
            dash_duo.wait_for_contains_text(title, name, timeout=15)
            time.sleep(0.5)  # plotly redraws at the new size
            m = dash_duo.driver.execute_script(_WIDTHS, title)
            assert m["scroll"] <= m["client"] <= width, (title, width, m)
            assert m["title_right"] <= m["client"], (title, width, m)
