"""Back and Forward: the view follows the address, in headless Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest
from dash.testing.wait import until

from tests.dashboards.test_ranges import _checked, _pick, _span_h, _start, history  # noqa: F401

pytestmark = pytest.mark.browser


def test_back_restores_the_range_the_address_says(dash_duo, history: Path) -> None:  # noqa: F811
    _start(dash_duo, history, "/node/node-001?range=6h&gpu=1")
    dash_duo.wait_for_text_to_equal("#node-focus", "GPU 1", timeout=15)
    until(lambda: 6.0 <= _span_h(dash_duo) < 6.1, timeout=15)
    _pick(dash_duo, "node-range", "24h")
    until(lambda: "range=24h" in dash_duo.driver.current_url, timeout=10)
    until(lambda: 24.0 <= _span_h(dash_duo) < 24.1, timeout=10)
    # Picking a range does not draw the page again: the picker keeps its place.
    assert _checked(dash_duo, "node-range") == "24h"
    dash_duo.driver.back()
    until(lambda: "range=6h" in dash_duo.driver.current_url, timeout=10)
    until(lambda: _checked(dash_duo, "node-range") == "6h", timeout=10)
    until(lambda: 6.0 <= _span_h(dash_duo) < 6.1, timeout=10)
    dash_duo.wait_for_text_to_equal("#node-focus", "GPU 1", timeout=10)
    dash_duo.driver.forward()
    until(lambda: _checked(dash_duo, "node-range") == "24h", timeout=10)
    until(lambda: 24.0 <= _span_h(dash_duo) < 24.1, timeout=10)
    assert dash_duo.get_logs() == []
