"""The store can still be read but no longer written (``fleetwatch up`` on a full disk,
or past its file size limit): the fleet page says so over data that otherwise look only
a little old, and the banner goes once writes work again."""

from __future__ import annotations

import pytest

from fleetwatch.dashboards import create_app
from tests.dashboards.conftest import SimFleet
from tests.dashboards.test_browser import texts

pytestmark = pytest.mark.browser


def test_a_store_that_cannot_be_written_is_a_banner(dash_duo, sim_fleet: SimFleet) -> None:
    problem: list[str | None] = [None]
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=1.0,
                                     store_problem=lambda: problem[0]))
    dash_duo.wait_for_contains_text("#summary-firing", "1 critical", timeout=15)
    assert not texts(dash_duo, "#fleet-store-problem")
    problem[0] = ("store not writable since 18:27:35 UTC: sqlite write in sim.db failed: "
                  "the disk holding sim.db is full")
    dash_duo.wait_for_contains_text("#fleet-store-problem", "store not writable since 18:27:35",
                                    timeout=10)
    assert "the disk holding sim.db is full" in texts(dash_duo, "#fleet-store-problem")[0]
    assert "store not writable" in texts(dash_duo, "#fleet-updated")[0]
    problem[0] = None
    dash_duo.wait_for_no_elements("#fleet-store-problem", timeout=10)
