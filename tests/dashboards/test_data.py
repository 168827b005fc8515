"""Reading the store into page records, and the pages' HTML pieces, without a browser."""

from __future__ import annotations

import pytest

from fleetwatch.dashboards import alert_tables, components, data, node_data, summary_strip
from fleetwatch.pipeline.store.base import Annotation, StoreError
from tests.dashboards.fakes import NOW, FakeStore, alert, point


def text_of(component: object) -> str:
    """All the text under a Dash component, depth first."""
    if component is None:
        return ""
    if isinstance(component, str | int | float):
        return str(component)
    if isinstance(component, list | tuple):
        return " ".join(text_of(c) for c in component)
    return text_of(getattr(component, "children", None))


def fleet_store() -> FakeStore:
    return FakeStore(points=[
        point("gpu_temp_c", "node-b", 0, 60, rack="rack-01"),
        point("gpu_temp_c", "node-a", 1, 70, age_s=100), point("gpu_temp_c", "node-a", 1, 88),
        point("gpu_temp_c", "node-a", 0, 50, age_s=data.STALE_S + 60),  # gone quiet
        point("gpu_temp_c", "node-a", None, 30),  # not a GPU
        point("gpu_power_w", "node-a", 1, 410.5), point("gpu_util_pct", "node-b", 0, 97),
    ], alert_rows=[alert("node-b", 0, "pending", started_ago_s=60),
                   alert("node-a", 1, "firing"), alert("node-c", 2, "resolved")])


def test_fleet_cells_join_metrics_per_gpu() -> None:
    view = data.read_fleet(fleet_store(), NOW)
    assert [(c.node, c.gpu, c.temp_c, c.power_w, c.util_pct) for c in view.cells] == [
        ("node-a", 1, 88, 410.5, None), ("node-b", 0, 60, None, 97)]
    assert view.hottest is not None and (view.hottest.node, view.hottest.gpu) == ("node-a", 1)
    assert view.newest_ms == int((NOW - 10) * 1000)


def test_active_alerts_firing_first() -> None:
    view = data.read_fleet(fleet_store(), NOW)
    assert [(a.node, a.state) for a in view.alerts] == [("node-a", "firing"),
                                                        ("node-b", "pending")]
    assert (view.count("firing"), view.count("pending")) == (1, 1)


def test_read_alerts_splits_active_and_resolved() -> None:
    active, resolved = data.read_alerts(fleet_store(), NOW)
    assert [a.state for a in active] == ["firing", "pending"]
    assert [(a.node, a.state) for a in resolved] == [("node-c", "resolved")]


def test_read_node_keeps_its_own_series_annotations_and_alerts() -> None:
    store = fleet_store()
    store.points += [point("gpu_temp_c", "node-a", 1, 65, age_s=4000)]  # older than the hour
    store.annotation_rows = [
        Annotation("cooling", NOW - 900, NOW + 900, "node-a", "gpu1", "injected"),
        Annotation("cooling", NOW - 900, NOW + 900, "node-b", "gpu0", "injected")]
    view = node_data.read_node(store, "node-a", NOW)
    assert view.rack == "rack-00"
    # GPU 0 is too quiet for the heatmap but still within the node's hour.
    assert view.series["gpu_temp_c"] == {
        0: [(int((NOW - data.STALE_S - 60) * 1000), 50)],
        1: [(int((NOW - 100) * 1000), 70), (int((NOW - 10) * 1000), 88)]}
    assert view.series["gpu_power_w"] == {1: [(int((NOW - 10) * 1000), 410.5)]}
    assert view.series["gpu_util_pct"] == {}
    assert [a.device for a in view.annotations] == ["gpu1"]
    assert [a.node for a in view.alerts] == ["node-a"]
    assert view.end_ms == int(NOW * 1000)


def test_read_node_shows_annotations_of_its_cluster_or_of_none() -> None:
    store = fleet_store()
    store.annotation_rows = [
        Annotation("fault", NOW - 900, NOW + 900, "node-a", "gpu1", "west's", cluster="west"),
        Annotation("fault", NOW - 900, NOW + 900, "node-a", "gpu2", "sim's", cluster="sim"),
        Annotation("fault", NOW - 900, NOW + 900, "node-a", "gpu3", "old", cluster="")]
    view = node_data.read_node(store, "node-a", NOW, cluster="sim")
    assert [a.text for a in view.annotations] == ["sim's", "old"]


def test_read_node_unknown_node_is_empty_not_an_error() -> None:
    view = node_data.read_node(fleet_store(), "nope", NOW)
    assert view.rack is None and not any(view.series.values()) and view.alerts == ()


def test_store_errors_reach_the_caller_as_store_errors() -> None:
    with pytest.raises(StoreError):
        data.read_fleet(FakeStore(broken=True), NOW)


def test_summary_strip() -> None:
    tiles = {t.id: text_of(t) for t in summary_strip.summary(data.read_fleet(fleet_store(), NOW),
                                                             NOW)}
    assert tiles["summary-reporting"].split()[2] == "2"
    assert "88°C" in tiles["summary-hottest"] and "node-a · GPU 1" in tiles["summary-hottest"]
    assert "1" in tiles["summary-firing"].split() and "1 critical" in tiles["summary-firing"]
    assert "10 s ago" in tiles["summary-asof"]


def test_summary_of_an_empty_fleet() -> None:
    tiles = {t.id: text_of(t) for t in summary_strip.summary(data.read_fleet(FakeStore(), NOW),
                                                             NOW)}
    assert "0" in tiles["summary-reporting"].split() and "n/a" in tiles["summary-hottest"]
    # No data is not "all clear": the alert tiles say there is nothing to judge by.
    assert "no data yet" in tiles["summary-firing"] and "all clear" not in tiles["summary-firing"]


def test_alert_table_rows_link_to_nodes() -> None:
    alerts = data.sort_alerts([alert("node-b", 0, "pending"), alert("node-a", 1, "firing")])
    table = alert_tables.alert_table(alerts, NOW, "t")
    rows = table.children.children[1].children
    assert [r.className for r in rows] == ["alert-row state-firing", "alert-row state-pending"]
    # The message opens that GPU on its node's page.
    (message,) = [td for td in rows[0].children if td.className == "message"]
    # With its cluster: node names repeat across clusters.
    assert message.children[0].href == "/node/node-a?cluster=sim&gpu=1"
    # A firing alert is since it fired (as Alertmanager's startsAt), a pending one since
    # its condition began.
    assert "GPU 1" in text_of(rows[0]) and "9 min ago" in text_of(rows[0])
    assert "10 min ago" in text_of(rows[1])
    assert alert_tables.alert_table([], NOW, "t").id == "t-empty"


def test_nav_marks_the_current_page() -> None:
    off = "nav-link"
    assert components.nav_classes("/") == ["nav-link active", off, off, off, off]
    assert components.nav_classes("/alerts") == [off, "nav-link active", off, off, off]
    assert components.nav_classes("/node/node-001") == ["nav-link active", off, off, off, off]
    assert components.nav_classes("/utilization") == [off, off, "nav-link active", off, off]
    assert components.nav_classes("/energy") == [off, off, off, "nav-link active", off]
    assert components.nav_classes("/facility") == [off, off, off, off, "nav-link active"]


def test_ago() -> None:
    assert [components.ago(NOW - s, NOW) for s in (5, 600, 7200, 3 * 86400)] == [
        "5 s ago", "10 min ago", "2.0 h ago", "3.0 d ago"]


def test_stale_data_is_one_truth_not_no_data_and_alerts_firing() -> None:
    store = FakeStore(points=[point("gpu_temp_c", "node-a", 1, 91.0, age_s=900)],
                      alert_rows=[alert("node-a", 1, "firing")])
    view = data.read_fleet(store, NOW)
    assert not view.cells and view.last_ms == int((NOW - 900) * 1000)
    text = summary_strip.no_data_text(view, NOW)
    assert text.startswith("No fresh data: no GPU has reported since") and "15 min ago" in text
    tiles = {t.id: text_of(t) for t in summary_strip.summary(view, NOW)}
    # The firing count is said "as of" the last data, never as if it were live.
    assert "as of" in tiles["summary-firing"] and "no data since" in tiles["summary-firing"]
    assert "No data yet" not in text


def test_never_any_data_says_no_data_yet() -> None:
    view = data.read_fleet(FakeStore(), NOW)
    assert view.last_ms is None
    assert summary_strip.no_data_text(view, NOW).startswith("No data yet")


def test_node_links_quote_the_whole_name() -> None:
    assert components.node_href("a/b?c#d") == "/node/a%2Fb%3Fc%23d"
    assert components.node_href("node-001", 3) == "/node/node-001?gpu=3"


def test_node_limits_come_from_the_threshold_and_the_power_limit_gpus_report() -> None:
    store = FakeStore(points=[point("gpu_temp_c", "node-a", 0, 60.0),
                              point("gpu_power_limit_w", "node-a", 0, 700.0, age_s=60),
                              point("gpu_power_limit_w", "node-a", 0, 500.0, age_s=10),
                              point("gpu_power_limit_w", "node-a", 1, 450.0)])
    view = node_data.read_node(store, "node-a", NOW, temp_limit_c=85.0)
    assert view.limits == {"gpu_temp_c": 85.0, "gpu_power_w": 500.0}
    assert node_data.read_node(store, "node-b", NOW).limits == {}


def test_without_a_site_limit_the_temperature_line_is_the_lowest_slowdown_gpus_report() -> None:
    store = FakeStore(points=[point("gpu_temp_c", "node-a", 0, 60.0),
                              point("gpu_slowdown_temp_c", "node-a", 0, 89.0),
                              point("gpu_slowdown_temp_c", "node-a", 1, 87.0, age_s=30),
                              point("gpu_slowdown_temp_c", "node-a", 1, 88.0, age_s=5)])
    read_node = node_data.read_node
    assert read_node(store, "node-a", NOW).limits == {"gpu_temp_c": 88.0}
    assert read_node(store, "node-a", NOW, temp_limit_c=0.0).limits == {"gpu_temp_c": 88.0}
    assert read_node(store, "node-a", NOW, temp_limit_c=75.0).limits == {"gpu_temp_c": 75.0}


def test_one_sample_stamped_2099_does_not_move_data_as_of() -> None:
    # Stored by a processor that did not yet bound frames to its clock: "data as of" stays
    # at the newest sample up to now, and the tile says a node's clock runs ahead.
    store = fleet_store()
    store.points.append(point("gpu_temp_c", "node-z", 0, 50, age_s=NOW - 4_102_444_799.0))
    view = data.read_fleet(store, NOW)
    tiles = {t.id: text_of(t) for t in summary_strip.summary(view, NOW)}
    assert "23:59:59" not in tiles["summary-asof"] and "10 s ago" in tiles["summary-asof"]
    assert "1 GPU stamped after now: a node's clock runs ahead" in tiles["summary-asof"]
    assert summary_strip.last_read(view, NOW)["newest_ms"] == int((NOW - 10) * 1000)


def test_a_silent_nodes_page_names_its_rack_from_its_alerts() -> None:
    # No sample in the range (silent for 4 h, 1 h shown): the title still has its rack,
    # as its node_silent alert names it, not "node-253 · sim" alone.
    store = FakeStore(alert_rows=[alert("node-253", None, rack="rack-126", rule="node_silent",
                                        started_ago_s=4 * 3600)])
    view = node_data.read_node(store, "node-253", NOW, window_s=3600)
    assert not any(view.series.values()) and view.rack == "rack-126"
