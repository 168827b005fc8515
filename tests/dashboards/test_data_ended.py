"""Open alerts of data that ended (a replay store, days old): shown as open when the data
ended, with their last evidence, not as "firing ... active now, 8 d ago" for ever; alerts
of live data keep saying since when they fire."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fleetwatch import alert_view
from fleetwatch.cli import main
from fleetwatch.dashboards import alert_tables
from fleetwatch.dashboards import alerts as alerts_page
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.fakes import NOW, FakeStore, alert, point
from tests.dashboards.test_data import text_of

DAYS_8 = 8 * 86400.0


def test_data_end_is_the_newest_sample_once_none_came_lately() -> None:
    old = FakeStore(points=[point("gpu_temp_c", "n1", 0, 50.0, age_s=DAYS_8)])
    assert alert_view.data_end(old, NOW) == pytest.approx(NOW - DAYS_8)
    live = FakeStore(points=[point("gpu_temp_c", "n1", 0, 50.0, age_s=10)])
    assert alert_view.data_end(live, NOW) is None
    assert alert_view.data_end(FakeStore(), NOW) is None


def test_an_open_alert_of_ended_data_says_so_and_a_resolved_one_is_unchanged() -> None:
    ended = NOW - DAYS_8
    firing = dataclasses.replace(alert("n1", 3, started_ago_s=DAYS_8 + 3600),
                                 updated_ts=ended - 50)
    said = alert_view.when(firing, NOW, ended)
    assert said.startswith("firing at the end of the data (") and "8 d 0 h ago" in said
    assert "last evidence" in said and "firing since" not in said
    assert alert_view.when(firing, NOW).startswith("firing since")  # live data: as before
    resolved = alert("n1", 2, state="resolved", started_ago_s=DAYS_8 + 3600)
    assert alert_view.when(resolved, NOW, ended) == alert_view.when(resolved, NOW)
    table = text_of(alert_tables.alert_table([firing], NOW, "t", ended=ended))
    assert "open when the data ended, 8.0 d ago; last evidence" in table


def test_the_alerts_page_says_the_data_ended_above_its_tables() -> None:
    ended = NOW - DAYS_8
    active, _ = alerts_page.tables([alert("n1", 3)], [], NOW, "24h", {}, ended)
    assert "open when the data ended" in text_of(active)
    banner = alert_tables.ended_notice(ended, NOW, "x")
    assert banner is not None and "No data since" in banner.children
    assert alert_tables.ended_notice(None, NOW, "x") is None


def test_fleetwatch_alerts_on_a_replay_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                             ) -> None:
    import time

    now = time.time()
    store = SqliteStore(tmp_path / "replay.db")
    store.write([Frame("c", "r", "n1", now - DAYS_8 - 600 + 10 * i, (
        GpuReading(3, "GPU-3", "H100", {"gpu_temp_c": 50.0}),)) for i in range(60)])
    a = alert("n1", 3)
    store.write_alerts([dataclasses.replace(
        a, cluster="c", rack="r", started_ts=now - DAYS_8 - 500, fired_ts=now - DAYS_8 - 440,
        updated_ts=now - DAYS_8 - 20)])
    store.close()
    assert main(["alerts", "--store", str(tmp_path / "replay.db")]) == 0
    out = capsys.readouterr().out
    assert "no data since" in out and "as the data left them" in out, out
    assert "firing at the end of the data" in out and "firing since" not in out, out
