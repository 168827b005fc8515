"""``fleetwatch up`` in a real browser while its simulation catches up: the fleet page
draws the fleet on the simulated clock and its "refreshed" stamp says the time is
simulated and how far behind the wall clock it is, and each GPU's hover its job
(headless Chromium, a real ``up`` subprocess)."""

from __future__ import annotations

from pathlib import Path

from dash.testing.wait import until

from tests.core.test_up import start_up, stop, wait_for_line
from tests.servers import free_port


def test_the_fleet_page_says_simulated_time_while_up_catches_up(dash_br, tmp_path: Path
                                                               ) -> None:
    port = free_port()
    # An hour of backfill at 2x: the catch-up lasts far longer than the test.
    up = start_up(tmp_path, "--port", str(port), "--backfill", "1h", "--speed", "2",
                  "--no-faults")
    try:
        wait_for_line(up, "dashboard: http://")
        dash_br.driver.get(f"http://127.0.0.1:{port}/")
        dash_br.wait_for_element("#fleet-heatmap .heatmaplayer .hm", timeout=30)

        def stamp() -> str:
            return dash_br.driver.execute_script(
                "const e = document.querySelector('#fleet-updated');"
                "return e ? e.textContent : '';")

        until(lambda: "simulated time, catching up" in stamp(), timeout=30)
        text = stamp()
        assert text.startswith("refreshed ") and "behind the wall clock" in text, text
        assert "min behind" in text, text  # about an hour behind, said in minutes
        # The fleet is drawn although its data is an hour old on the wall clock.
        assert not dash_br.driver.find_elements("css selector", "#fleet-empty")
        # Each GPU's hover names its job (the simulated jobs' events, read as they come).
        until(lambda: "job  " in dash_br.driver.execute_script(
            "const g = document.querySelector('#fleet-heatmap .js-plotly-plot');"
            "return JSON.stringify(g && g.data ? g.data[0].customdata : null);"), timeout=30)
        assert dash_br.get_logs() == []
    finally:
        code, out = stop(up)
    assert code == 0, out
