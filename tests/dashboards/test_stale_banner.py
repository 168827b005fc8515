"""A page whose newest data are stale says so in a banner on every page: how old, and
whether the collectors (the store's newest sample) or the page (its own refresh) are
behind; it clears once caught up; an empty store says "waiting for the first data"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.dashboards import create_app, fresh
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards import fakes
from tests.dashboards.conftest import INTERVAL_S, SimFleet
from tests.dashboards.test_browser import texts

LIMIT_S = 30.0  # the banner's threshold in the browser tests (the default is a minute)


def test_check_reads_the_newest_sample_and_the_threshold() -> None:
    store = fakes.FakeStore([fakes.point("gpu_temp_c", "n0", 0, 60.0, age_s=400),
                             fakes.point("gpu_temp_c", "n1", 0, 60.0, age_s=90)])
    got = fresh.check(store, fakes.NOW, refresh_s=5.0)
    assert got == {"read_ms": int(fakes.NOW * 1000), "stale_ms": 60_000,
                   "newest_ms": int((fakes.NOW - 90) * 1000)}
    assert fresh.stale_after_ms(30.0) == 90_000  # never under three refreshes


def test_check_finds_old_data_empty_store_and_clock_ahead() -> None:
    old = fakes.FakeStore([fakes.point("gpu_temp_c", "n0", 0, 60.0, age_s=86_400)])
    assert fresh.check(old, fakes.NOW, 5.0)["newest_ms"] == int((fakes.NOW - 86_400) * 1000)
    assert fresh.check(fakes.FakeStore(), fakes.NOW, 5.0)["newest_ms"] is None
    # A node an hour ahead does not hide the others' stopping.
    ahead = fakes.FakeStore([fakes.point("gpu_temp_c", "n0", 0, 60.0, age_s=-3600),
                             fakes.point("gpu_temp_c", "n1", 0, 60.0, age_s=600)])
    assert fresh.check(ahead, fakes.NOW, 5.0)["newest_ms"] == int((fakes.NOW - 600) * 1000)
    broken = fresh.check(fakes.FakeStore(broken=True), fakes.NOW, 5.0)
    assert "newest_ms" not in broken and "fake store is down" in broken["error"]


def test_a_new_page_looks_back_in_growing_windows_not_from_the_start() -> None:
    from fleetwatch.alert_view import TICK_METRICS

    """A page's first check has no earlier answer (every load, tab, reload): it asks the
    last 5 min, then 1 h, 1 day, 7 days, and the store's start only where those hold none."""
    def spy(age_s: float) -> tuple[fakes.FakeStore, list[int]]:
        store = fakes.FakeStore([fakes.point("gpu_temp_c", "n0", 0, 60.0, age_s=age_s)])
        reads: list[int] = []
        inner = store.newest_ms
        store.newest_ms = lambda m, since, until, cluster=None: (  # type: ignore[method-assign]
            reads.append(since) or inner(m, since, until, cluster))
        return store, reads

    def ms(age_s: float) -> int:
        return int((fakes.NOW - age_s) * 1000)

    hours_2, reads = spy(7200)
    assert fresh.check(hours_2, fakes.NOW, 5.0)["newest_ms"] == ms(7200)
    # (each window asked of each metric every agent sends each tick: GPU and host)
    assert reads == [ms(back) for back in (300, 3600, 86_400) for _ in TICK_METRICS]
    days_8, reads = spy(8 * 86_400)
    assert fresh.check(days_8, fakes.NOW, 5.0)["newest_ms"] == ms(8 * 86_400)
    assert reads[-1] == 0  # data older than a week: only then from the start
    # Told the last answer, the check reads from there, not from the store's start.
    days_8, reads = spy(8 * 86_400)
    assert fresh.check(days_8, fakes.NOW, 5.0, ms(8 * 86_400))["newest_ms"] == ms(8 * 86_400)
    assert reads[-1] == ms(8 * 86_400) and 0 not in reads


# live.js's pure rule, run in the page: (now, check, checkAt, pageAt, everyMs, error).
STALE_JS = "return window.dash_clientside.fleetwatch.stale.apply(null, arguments);"


@pytest.mark.browser
def test_the_stale_rule_names_who_is_behind(dash_duo, tmp_path: Path) -> None:
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "s.db"), refresh_s=5.0))
    dash_duo.wait_for_element("#fleet-stale", timeout=10)

    def rule(collectors_s: float, page_s: float, check_s: float = 0.0) -> dict | None:
        now = 1_000_000_000_000
        check = {"read_ms": 5_000_000, "newest_ms": 5_000_000 - int(collectors_s * 1000),
                 "stale_ms": 60_000}
        return dash_duo.driver.execute_script(STALE_JS, now, check, now - check_s * 1000,
                                              now - page_s * 1000, 5000, "")

    assert rule(10, 3) is None  # caught up
    collectors = rule(300, 2)["text"]
    assert "5 min old" in collectors and "collectors are behind" in collectors
    assert "page is behind" not in collectors
    page = rule(5, 90)["text"]
    assert "page is behind" in page and "this page last refreshed" in page
    assert "collectors are behind" not in page and "95 s old" in page
    assert "dashboard last read the store" in rule(5, 1, check_s=120)["text"]
    both = rule(45, 45)["text"]
    assert "collectors are behind" in both and "page is behind" in both
    waiting = dash_duo.driver.execute_script(STALE_JS, 0, {"read_ms": 0, "newest_ms": None,
                                                           "stale_ms": 60_000}, 0, 0, 5000, "")
    assert "Waiting for the first data" in waiting["text"] and "waiting" in waiting["cls"]
    assert dash_duo.driver.execute_script(STALE_JS, 0, None, None, 0, 5000, "") is None


def banner(dash_duo, page: str = "fleet") -> str:
    found = texts(dash_duo, f"#{page}-stale:not([hidden])")
    return found[0] if found else ""


@pytest.mark.browser
@pytest.mark.headroom(600)
def test_collectors_behind_shows_then_clears_then_shows_again(
        dash_duo, sim_fleet: SimFleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fresh, "STALE_AFTER_S", LIMIT_S)
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=1.0))
    # The fleet's newest sample is ten minutes old: said at once.
    until(lambda: "collectors are behind" in banner(dash_duo), timeout=10)
    assert "10 min old" in banner(dash_duo) and "page is behind" not in banner(dash_duo)
    # Caught up (the feed brought to now): the banner goes.
    sim_fleet.advance(int(600 / INTERVAL_S))
    until(lambda: banner(dash_duo) == "", timeout=10)
    # The feed stops: within the threshold and a few refreshes, the banner is back.
    stopped = time.monotonic()
    until(lambda: "collectors are behind" in banner(dash_duo), timeout=LIMIT_S + 15)
    assert time.monotonic() - stopped <= LIMIT_S + 15
    # On the node page too (every page has it).
    dash_duo.driver.get(dash_duo.server_url + "/node/node-001")
    until(lambda: "collectors are behind" in banner(dash_duo, "node"), timeout=10)
    assert dash_duo.get_logs() == []


@pytest.mark.browser
def test_an_empty_store_waits_for_the_first_data(dash_duo, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "empty.db")
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "empty.db", read_only=True),
                                     refresh_s=1.0))
    until(lambda: "Waiting for the first data" in banner(dash_duo), timeout=10)
    assert "Stale" not in banner(dash_duo)
    assert "waiting" in dash_duo.find_element("#fleet-stale").get_attribute("class")
    # The first sample arrives: the banner goes.
    gpu = GpuReading(0, "GPU-0", "NVIDIA A100-SXM4-80GB", {"gpu_temp_c": 55.0})
    store.write([Frame("sim", "rack-00", "node-000", time.time(), (gpu,), HostReading())])
    until(lambda: banner(dash_duo) == "", timeout=10)
    store.close()
