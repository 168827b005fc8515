"""What an RMA engineer reads on the dashboard: each alert's suggested action in the alert
tables, and on the node page its GPUs' events (XIDs with their meaning, a GPU lost) and the
error counters (ECC, retired pages, row remapping, PCIe, NVLink) of the GPU brought forward."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fleetwatch.dashboards import alert_tables, create_app, node_errors
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.store.base import Event, group_events
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.fakes import NOW, alert
from tests.dashboards.test_alert_table import rows
from tests.dashboards.test_data import text_of

RMA = "Drain the node; the GPU needs service (RMA)"


def test_the_alert_table_shows_the_suggested_action_in_its_own_column() -> None:
    a = dataclasses.replace(alert("node-a", 3, rule="gpu_xid_critical"), action=RMA)
    table = alert_tables.alert_table([a], NOW, "t")
    (row,) = rows(table)
    cells = [c for c in row.children if getattr(c, "className", "") == "action"]
    assert [c.children for c in cells] == [RMA]
    assert "ActionId" in text_of(table).replace(" ", "")  # the header, before the id


def xid(ts: float, code: int, gpu: int = 3, text: str = "") -> Event:
    return Event(ts, "xid", "c", "r", "n1", f"gpu{gpu}", code, "", text)


def test_events_say_the_xid_its_meaning_and_action_newest_first() -> None:
    lost = Event(NOW - 10, "gpu_state", "c", "r", "n1", "gpu5", 0, "lost")
    table = node_errors.events_table(
        group_events([xid(NOW - 300, 48), xid(NOW - 200, 64), lost]), NOW, "-")
    got = [text_of(r) for r in node_errors_rows(table)]
    assert "GPU 5" in got[0] and "GPU state: lost" in got[0]
    assert "XID 64 · ECC page retirement or row remapping failure" in got[1]
    assert "RMA" in got[1] and "XID 48 · Double-bit ECC error" in got[2]
    assert node_errors.event_what(xid(NOW, 64))[2] == "critical"
    assert node_errors.event_what(xid(NOW, 60000))[0] == "XID 60000 · XID 60000"


def test_repeats_of_one_gpus_xid_are_one_row_and_bury_nothing() -> None:
    """GPU 3's XID 48 once a second for an hour, and GPU 1's XID 79 before it: two rows,
    the repeats counted with their first and last time."""
    storm = [xid(NOW - 3600 + k, 48) for k in range(3600)]
    groups = group_events([xid(NOW - 4000, 79, gpu=1), *storm])
    assert [(g.last.device, g.last.code, g.count, g.first_ts, g.last.ts) for g in groups] == [
        ("gpu3", 48, 3600, NOW - 3600, NOW - 1), ("gpu1", 79, 1, NOW - 4000, NOW - 4000)]
    got = [text_of(r) for r in node_errors_rows(node_errors.events_table(groups, NOW, "-"))]
    assert len(got) == 2 and "XID 79" in got[1] and "GPU 1" in got[1]
    assert "3,600×" in got[0] and "first" in got[0]


def node_errors_rows(table) -> list:
    out = []

    def walk(c) -> None:
        if getattr(c, "className", None) == "event-row":
            out.append(c)
        kids = getattr(c, "children", None)
        for k in kids if isinstance(kids, list) else [kids] if kids is not None else []:
            if not isinstance(k, str):
                walk(k)
    walk(table)
    return out


def test_a_counter_rises_over_a_reset_and_says_its_newest_value() -> None:
    from tests.dashboards.fakes import point

    pts = [point("gpu_pcie_replay_total", "n1", 3, v, age_s=60 - i)
           for i, v in enumerate((100.0, 150.0, 0.0, 20.0))]  # a driver reload between
    c = node_errors.counter("gpu_pcie_replay_total", pts)
    assert c is not None and c.newest == 20.0 and c.rise == 70.0
    assert node_errors.counter("gpu_pcie_replay_total", []) is None


HOUR = 3600.0


def _store(path: Path) -> SqliteStore:
    """n1: GPU 3 with a DBE, a retired page pending and XIDs 48 then 64; GPU 5 lost."""
    store = SqliteStore(path)
    frames = []
    for i in range(30):
        ts = NOW - HOUR / 2 + i * 60
        dbe = 0.0 if i < 10 else 1.0
        frames.append(Frame("c", "r", "n1", ts, (
            GpuReading(3, "GPU-3", "A100", {"gpu_temp_c": 50.0, "gpu_power_w": 200.0,
                                            "gpu_ecc_dbe_volatile_total": dbe,
                                            "gpu_retired_pages_pending": dbe}),)))
    store.write(frames)
    store.write_events([xid(NOW - 1200, 48), xid(NOW - 600, 64),
                        Event(NOW - 300, "gpu_state", "c", "r", "n1", "gpu5", 0, "lost")])
    # The alert of the frames' own cluster: the node page shows one cluster's node.
    store.write_alerts([dataclasses.replace(alert("n1", 3, rule="gpu_xid_critical",
                                                  rack="r"), action=RMA, cluster="c")])
    return store


def test_read_errors_reads_the_nodes_events_and_the_gpus_counters(tmp_path: Path) -> None:
    store = _store(tmp_path / "e.db")
    got = node_errors.read_errors(store, "n1", NOW - HOUR, NOW + 60, 3)
    assert [(g.last.kind, g.last.code, g.last.value, g.count) for g in got.events] == [
        ("gpu_state", 0, "lost", 1), ("xid", 64, "", 1), ("xid", 48, "", 1)]
    by = {c.metric: c for c in got.counters}
    assert set(by) == {"gpu_ecc_dbe_volatile_total", "gpu_retired_pages_pending"}
    assert by["gpu_ecc_dbe_volatile_total"].rise == 1.0
    assert node_errors.read_errors(store, "n1", NOW - HOUR, NOW + 60, None).counters == ()
    text = text_of(node_errors.counters_table(got, NOW, "n1"))
    assert "Double-bit ECC errors since the driver loaded" in text and "+1" in text


def test_read_errors_groups_in_the_store_and_reads_no_event_one_by_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A storm node: the SQLite store counts the repeats in its query, so a refresh
    makes no Python object per event (31k events took 0.36 s, growing with the range)."""
    store = SqliteStore(tmp_path / "s.db")
    store.write_events([xid(NOW - 20000 + k, 48) for k in range(20000)])
    store.write_events([xid(NOW - 30000, 79, gpu=1, text="NVRM: Xid 79"),
                        Event(NOW - 29990, "gpu_state", "c", "r", "n1", "gpu1", 0, "lost"),
                        xid(NOW - 100, 13, gpu=2), xid(NOW - 100, 13, gpu=4),
                        Event(NOW - 10, "xid", "c", "r", "other", "gpu1", 79)])

    def one_by_one(*args: object, **kw: object) -> list[Event]:
        raise AssertionError("read event by event")

    monkeypatch.setattr(store, "events", one_by_one)
    got = node_errors.read_errors(store, "n1", NOW - 40000, NOW + 60, None)
    assert [(g.last.device, g.last.kind, g.last.code, g.last.value, g.count, g.first_ts,
             g.last.ts) for g in got.events] == [
        ("gpu3", "xid", 48, "", 20000, NOW - 20000, NOW - 1),
        ("gpu2", "xid", 13, "", 1, NOW - 100, NOW - 100),
        ("gpu4", "xid", 13, "", 1, NOW - 100, NOW - 100),
        ("gpu1", "gpu_state", 0, "lost", 1, NOW - 29990, NOW - 29990),
        ("gpu1", "xid", 79, "", 1, NOW - 30000, NOW - 30000)]
    store.close()


def test_a_refresh_counts_at_most_the_newest_events_and_says_from_when(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_errors, "EVENTS_READ", 1000)
    store = SqliteStore(tmp_path / "s.db")
    store.write_events([xid(NOW - 5000 + k, 48) for k in range(5000)])
    got = node_errors.read_errors(store, "n1", NOW - 6000, NOW + 60, None)
    [(g)] = got.events
    assert (g.count, g.first_ts, g.last.ts, got.counted_from) == (
        1000, NOW - 1000, NOW - 1, NOW - 1000)
    text = text_of(node_errors.events_table(got.events, NOW, "-", got.counted_from))
    assert "counted over the newest 1,000 events" in text
    few = node_errors.read_errors(store, "n1", NOW - 500, NOW + 60, None)
    assert few.counted_from is None and few.events[0].count == 500
    store.close()


@pytest.mark.browser
def test_the_node_page_shows_actions_events_and_counters(dash_duo, tmp_path: Path) -> None:
    _store(tmp_path / "e.db").close()
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "e.db", read_only=True),
                                     refresh_s=30.0, clock=lambda: NOW))
    dash_duo.driver.get(dash_duo.server_url + "/node/n1?gpu=3")
    dash_duo.wait_for_contains_text("#node-alert-table td.action", "RMA", timeout=15)
    dash_duo.wait_for_contains_text("#node-event-table", "XID 64", timeout=10)
    assert "GPU state: lost" in dash_duo.find_element("#node-event-table").text
    dash_duo.wait_for_contains_text("#node-counter-table", "Double-bit ECC", timeout=10)
    # The action wraps in its column: the row stays a few lines high.
    width = dash_duo.driver.execute_script(
        "return document.querySelector('#node-alert-table td.action')"
        ".getBoundingClientRect().width;")
    assert width < 24 * 13 + 40
    assert dash_duo.get_logs() == []
