"""A store that hangs (each read answers a StoreError only after longer than the page's
refresh, as VictoriaMetrics does past its timeout) or is gone: the page says so within a
refresh or two, and its tiles stop claiming fresh data and "all clear"."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import create_app, summary_strip
from fleetwatch.dashboards.data import read_fleet
from fleetwatch.pipeline.store.base import StoreError
from tests.dashboards import fakes
from tests.dashboards.conftest import SimFleet
from tests.dashboards.test_browser import texts

pytestmark = pytest.mark.browser
DELAY_S = 2.5  # longer than the page's refresh (1 s): each tick would supersede the last


class HangingStore:
    """A store whose reads, once ``hang`` is set, answer a StoreError after ``DELAY_S``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.hang = threading.Event()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not callable(value):
            return value

        def read(*args: Any, **kwargs: Any) -> Any:
            if self.hang.is_set():
                time.sleep(DELAY_S)
                raise StoreError(f"cannot query the store: timed out after {DELAY_S} s")
            return value(*args, **kwargs)
        return read


def tile(dash_duo, tile_id: str) -> str:
    found = texts(dash_duo, f"#{tile_id}")
    return found[0] if found else ""


def test_hung_store_is_shown_within_a_few_refreshes(dash_duo, sim_fleet: SimFleet) -> None:
    store = HangingStore(sim_fleet.reader())
    dash_duo.start_server(create_app(store, refresh_s=1.0))
    dash_duo.wait_for_contains_text("#summary-firing", "1 critical", timeout=15)
    store.hang.set()
    # Two slow answers at most (and the ticks in between): the banner is up.
    dash_duo.wait_for_contains_text("#notice", "Store unavailable", timeout=4 * DELAY_S + 2)
    assert "timed out" in texts(dash_duo, "#notice")[0]
    # The tiles no longer count what they cannot read, and the data's age keeps growing.
    assert "critical" not in tile(dash_duo, "summary-firing")
    assert "n/a" in tile(dash_duo, "summary-reporting")
    first = tile(dash_duo, "summary-asof")
    until(lambda: tile(dash_duo, "summary-asof") != first, timeout=4 * DELAY_S + 2)
    assert "store not answering" in texts(dash_duo, "#fleet-updated")[0]
    # Back: the page recovers without a reload.
    store.hang.clear()
    dash_duo.wait_for_contains_text("#summary-firing", "1 critical", timeout=4 * DELAY_S + 2)
    until(lambda: not texts(dash_duo, "#notice"), timeout=10)


def test_store_gone_clears_the_tiles_and_the_loading_heatmap(dash_duo, tmp_path) -> None:
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    dash_duo.start_server(create_app(SqliteStore(tmp_path / "absent.db", read_only=True),
                                     refresh_s=1.0))
    dash_duo.wait_for_contains_text("#notice", "Store unavailable", timeout=10)
    # Not "Loading…" for ever: the heatmap says why it is empty.
    until(lambda: "Store unavailable" in " ".join(
        texts(dash_duo, "#fleet-heatmap .annotation-text")), timeout=10)
    assert "all clear" not in tile(dash_duo, "summary-firing")
    assert dash_duo.get_logs() == []


def test_unavailable_summary_never_says_all_clear() -> None:
    view = read_fleet(fakes.FakeStore([fakes.point("gpu_temp_c", "node-000", 0, 60.0)]),
                      fakes.NOW)
    last = summary_strip.last_read(view, fakes.NOW)
    tiles = summary_strip.unavailable_summary(last, fakes.NOW + 60)
    text = " ".join(str(t.to_plotly_json()) for t in tiles)
    assert "all clear" not in text and "store not answering" in text
    asof = {t.id: t for t in tiles}["summary-asof"]
    # The sample was 10 s old at the last read, a minute ago: 70 s old now.
    assert "70 s ago" in str(asof.to_plotly_json())
    # Never read: nothing to say but that.
    assert "no read yet" in str(summary_strip.unavailable_summary(None, fakes.NOW)[0]
                                .to_plotly_json())


@pytest.mark.parametrize(("path", "ready", "stamp"), [
    ("/node/node-001", "#node-graph-gpu_temp_c .scatterlayer .trace", "#node-updated"),
    ("/alerts", "#active-alert-table tr.alert-row", "#alerts-updated")])
def test_hung_store_is_shown_on_the_node_and_alerts_pages(dash_duo, sim_fleet: SimFleet,
                                                         path: str, ready: str,
                                                         stamp: str) -> None:
    store = HangingStore(sim_fleet.reader())
    dash_duo.start_server(create_app(store, refresh_s=1.0))
    dash_duo.driver.get(dash_duo.server_url + path)
    dash_duo.wait_for_element(ready, timeout=15)
    store.hang.set()
    dash_duo.wait_for_contains_text("#notice", "Store unavailable", timeout=4 * DELAY_S + 2)
    assert "store not answering" in texts(dash_duo, stamp)[0]
