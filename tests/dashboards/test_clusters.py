"""Node names repeat across clusters (node001 in each): the dashboard's data keep a GPU as
(cluster, node, gpu), name nodes ``cluster/node`` where several clusters are shown, and
filter by cluster. Pure functions over ``FakeStore``; the browser test is in
``test_clusters_browser``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from dash import dcc

from fleetwatch.carbon import model_from_config
from fleetwatch.config import CarbonConfig, EnergyConfig
from fleetwatch.dashboards import (
    alert_tables,
    components,
    data,
    energy_data,
    figures,
    fleet,
    job_data,
    node,
    node_data,
    summary_strip,
    timerange,
    utilization,
)
from fleetwatch.dashboards import alerts as alerts_page
from fleetwatch.pipeline.store.base import Alert, Point, SeriesKey
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.fakes import NOW, FakeStore, alert


def pt(metric: str, cluster: str, node_name: str, gpu: int, value: float,
       age_s: float = 10.0) -> Point:
    key = SeriesKey(metric, cluster, "r1", node_name, f"gpu{gpu}")
    return key, int((NOW - age_s) * 1000), value


def in_cluster(a: Alert, cluster: str) -> Alert:
    return dataclasses.replace(a, cluster=cluster, id=f"{a.id}/{cluster}")


def two_clusters() -> FakeStore:
    """node001 in c-east (GPU 3 at 95 °C, gpu_temp_critical firing) and in c-west (61 °C)."""
    points = []
    for cluster, hot in (("c-east", 95.0), ("c-west", 61.0)):
        for g in range(4):
            for age in (70.0, 40.0, 10.0):
                points.append(pt("gpu_temp_c", cluster, "node001", g, hot if g == 3 else 50.0,
                                 age))
                points.append(pt("gpu_power_w", cluster, "node001", g, 300.0, age))
    hot_alert = in_cluster(alert("node001", 3, rule="gpu_temp_critical", value=95.0), "c-east")
    return FakeStore(points, [hot_alert])


def test_same_named_nodes_of_two_clusters_are_two_machines_on_the_fleet_page() -> None:
    view = data.read_fleet(two_clusters(), NOW)
    assert len(view.cells) == 8 and view.nodes == 2
    assert view.clusters == ("c-east", "c-west") and view.many_clusters
    assert view.hottest is not None
    assert (view.hottest.cluster, view.hottest.node, view.hottest.gpu,
            view.hottest.temp_c) == ("c-east", "node001", 3, 95.0)
    tiles = {t.id: t.children[2].children for t in summary_strip.summary(view, NOW)}
    assert tiles["summary-reporting"] == "on 2 nodes"
    assert tiles["summary-hottest"] == "c-east/node001 · GPU 3"


def test_the_heatmap_has_a_row_per_cluster_and_node_and_marks_the_right_one() -> None:
    view = data.read_fleet(two_clusters(), NOW)
    fig = figures.fleet_heatmap(view.cells, view.alerts)
    trace = fig.data[0]
    # Bottom to top in the figure: c-west's row is drawn below c-east's.
    assert list(trace.y) == ["c-west/node001", "c-east/node001"]
    east = list(trace.y).index("c-east/node001")
    assert trace.z[east][3] == 95.0 and trace.z[1 - east][3] == 61.0
    (shape,) = [s for s in fig.layout.shapes if (s.name or "").startswith("alert:")]
    assert (shape.y0, shape.y1, shape.x0) == (east - 0.5, east + 0.5, 2.5)
    # Rack r1 of each cluster is its own rack: two labels.
    assert [a.text for a in fig.layout.annotations] == ["r1", "r1"]


def test_one_cluster_shown_keeps_bare_names_and_its_own_gpus() -> None:
    view = data.read_fleet(two_clusters(), NOW, cluster="c-west")
    assert {c.cluster for c in view.cells} == {"c-west"} and len(view.cells) == 4
    assert view.alerts == () and not view.many_clusters
    assert view.clusters == ("c-east", "c-west")  # what the picker offers
    assert list(figures.fleet_heatmap(view.cells).data[0].y) == ["node001"]


def test_a_heatmap_row_opens_the_node_of_its_cluster() -> None:
    many = fleet.places(data.read_fleet(two_clusters(), NOW))
    assert fleet.clicked_href("c-west/node001", many, "7d") == (
        "/node/node001?cluster=c-west&range=7d")
    one = fleet.places(data.read_fleet(two_clusters(), NOW, cluster="c-east"))
    assert fleet.clicked_href("node001", one, None) == "/node/node001?cluster=c-east"
    # A "/" in a cluster's or a node's name stays where it belongs.
    assert figures.place_from_label("a/b/n/1", ["a", "a/b"], True) == ("a/b", "n/1")
    assert figures.place_from_label("n/1", ["a"], False) == ("a", "n/1")


def test_the_node_page_reads_one_clusters_node() -> None:
    store = two_clusters()
    east = node_data.read_node(store, "node001", NOW, cluster="c-east")
    assert east.cluster == "c-east" and east.ambiguous == ()
    assert [v for _, v in east.series["gpu_temp_c"][3]] == [95.0, 95.0, 95.0]
    assert [a.cluster for a in east.alerts] == ["c-east"]
    west = node_data.read_node(store, "node001", NOW, cluster="c-west")
    assert [v for _, v in west.series["gpu_temp_c"][3]] == [61.0, 61.0, 61.0]
    assert west.alerts == ()


def test_a_bare_node_name_in_two_clusters_lists_them_and_draws_nothing() -> None:
    view = node_data.read_node(two_clusters(), "node001", NOW)
    assert view.ambiguous == ("c-east", "c-west")
    assert view.series == {} and view.alerts == ()
    links = [c for c in node.choose_cluster("node001", view.ambiguous, 3, "6h").children
             if isinstance(c, dcc.Link)]
    assert [(link.children, link.href) for link in links] == [
        ("node001 in cluster c-east", "/node/node001?cluster=c-east&range=6h&gpu=3"),
        ("node001 in cluster c-west", "/node/node001?cluster=c-west&range=6h&gpu=3")]


def test_a_node_asked_in_a_cluster_without_it_names_the_clusters_it_reports_in() -> None:
    """An old link (``?cluster=default``, the agents' default) or a typo: the page says
    where the node is, with a link, rather than "no data" alone."""
    store = two_clusters()
    store.points.append(pt("gpu_temp_c", "c-west", "node002", 0, 44.0))
    view = node_data.read_node(store, "node002", NOW, cluster="default")
    assert not any(view.series.values()) and view.elsewhere == ("c-west",)
    shown = node.elsewhere_notice("node002", "default", view.elsewhere, None, "1h")
    assert shown.id == "node-elsewhere"
    links = [c for c in shown.children if isinstance(c, dcc.Link)]
    assert [(link.children, link.href) for link in links] == [
        ("node002 in cluster c-west", "/node/node002?cluster=c-west")]
    assert "No data from default/node002" in " ".join(
        c for c in shown.children if isinstance(c, str))
    # The node of the cluster asked is not "elsewhere"; nor is a name no cluster has.
    assert node_data.read_node(store, "node002", NOW, cluster="c-west").elsewhere == ()
    assert node_data.read_node(store, "node999", NOW, cluster="default").elsewhere == ()


def test_a_bare_node_name_in_one_cluster_is_that_clusters_node() -> None:
    store = two_clusters()
    store.points.append(pt("gpu_temp_c", "c-west", "node002", 0, 44.0))
    view = node_data.read_node(store, "node002", NOW)
    assert view.cluster == "c-west" and view.ambiguous == ()
    assert view.series["gpu_temp_c"] == {0: [(int((NOW - 10) * 1000), 44.0)]}


def test_alert_tables_name_the_cluster_where_alerts_are_of_several() -> None:
    a = in_cluster(alert("node001", 3), "c-east")
    b = in_cluster(alert("node001", 3), "c-west")
    table = alert_tables.alert_table([a, b], NOW, "t")
    head = [th.children for th in table.children.children[0].children.children]
    assert head[:5] == ["State", "Severity", "Rule", "Cluster", "Node"]
    rows = table.children.children[1].children
    assert [r.__dict__["data-cluster"] for r in rows] == ["c-east", "c-west"]
    cells = [[td.children for td in r.children if td.className == "cluster"] for r in rows]
    assert cells == [["c-east"], ["c-west"]]
    hrefs = [td.children[0].href for r in rows for td in r.children if td.className == "message"]
    assert hrefs == ["/node/node001?cluster=c-east&gpu=3", "/node/node001?cluster=c-west&gpu=3"]
    single = alert_tables.alert_table([a], NOW, "t")
    assert "Cluster" not in [th.children for th in single.children.children[0].children.children]


def test_the_alerts_page_filters_by_cluster_and_offers_every_one() -> None:
    a = in_cluster(alert("node001", 3), "c-east")
    b = in_cluster(alert("node001", 3, "resolved"), "c-west")
    seen, active, resolved = alerts_page.of_cluster([a], [b], "c-west")
    assert seen == ("c-east", "c-west") and active == [] and resolved == [b]
    assert alerts_page.of_cluster([a], [b], None) == (("c-east", "c-west"), [a], [b])
    assert components.cluster_options(seen, "c-gone") == [
        {"label": c, "value": c} for c in ("c-east", "c-gone", "c-west")]


def test_the_address_keeps_the_cluster() -> None:
    q = timerange.parse("?range=6h&cluster=c-east", "1h")
    assert (q.range, q.cluster) == ("6h", "c-east")
    assert timerange.Query("6h", cluster="c-east").search() == "?range=6h&cluster=c-east"
    assert not timerange.new_search("?range=6h&cluster=c-east", "1h", "6h", "c-east")
    assert timerange.new_search("?range=6h&cluster=c-east", "1h", "6h", None)
    assert timerange.new_search("?range=6h", "1h", "6h", "c-west")
    assert timerange.page_search("6h", 2, "c-east") == "?cluster=c-east&range=6h&gpu=2"
    assert fleet.alerts_href(None, "c-east") == "/alerts?range=24h&cluster=c-east"
    assert fleet.alerts_href(None) == "/alerts"
    assert node.cluster_of("?cluster=c-west&range=6h") == "c-west"


def test_ledger_rows_sum_as_the_store_sums_them() -> None:
    def row(cluster: str, device: str, job: str, energy_j: float) -> EnergyRow:
        return EnergyRow(3600, cluster, "r1", "node001", device, job, "u", "t", energy_j,
                         energy_j / 10, 3600.0, 60.0, 5.0, 1.0)

    rows = [row("c-east", "gpu0", "777", 3.6e6), row("c-east", "cpu", "777", 1.8e6),
            row("c-east", "gpu1", "778", 7.2e6)]
    totals = {t.name: t for t in energy_data.totals_from_rows(rows, "job")}
    assert totals["777"].energy_j == 5.4e6 and totals["777"].gpu_energy_j == 3.6e6
    assert totals["777"].gpu_s == 3600.0 and totals["777"].missing_s == 5.0
    assert totals["777"].idle_s == 120.0 and totals["778"].gpu_s == 3600.0


def test_one_clusters_energy_and_jobs_from_a_store(tmp_path: Path) -> None:
    """Job 777 ran in two clusters (Slurm ids restart per cluster): c-east's page has its
    own 777 and its own kWh, the fleet's page both clusters."""
    hour = int(NOW) - int(NOW) % 3600 - 3600
    store = SqliteStore(tmp_path / "store.db")
    rows = [EnergyRow(hour, c, "r1", node_name, "gpu0", "777", "u", "t", kj * 1000.0, 0.0,
                      3600.0, 0.0, 0.0, 0.0)
            for c, node_name, kj in (("c-east", "node102", 3600.0), ("c-north", "node101", 7200.0))]
    store.write_energy(rows, [])
    model = model_from_config(CarbonConfig(), EnergyConfig())
    east = energy_data.read_energy(store, model, hour, hour + 3600, NOW, cluster="c-east")
    assert east.seen == ("c-east", "c-north")
    assert list(east.by_cluster) == ["c-east"] and east.kwh == pytest.approx(1.0)
    assert [(j.name, j.kwh) for j in east.jobs] == [("777", pytest.approx(1.0))]
    both = energy_data.read_energy(store, model, hour, hour + 3600, NOW)
    assert both.kwh == pytest.approx(3.0)
    totals, jobs = utilization.ledger_totals(store, hour, hour + 3600, None, None, "c-north")
    assert [t.name for t in totals] == ["c-north"]
    assert [(t.name, t.gpu_s) for t in jobs] == [("777", 3600.0)]
    store.close()


def test_a_jobs_charts_are_of_its_clusters_node() -> None:
    """Job 42 on c-east/node001 GPU 3: c-west's node001 GPU 3 is not drawn in its line."""
    gpu = job_data.JobGpu("r1", "node001", 3, NOW - 600, None)
    view = job_data.read_job(two_clusters(), job_data.Job("42", "c-east", (gpu,)),
                             NOW - 600, NOW, NOW)
    assert [v for _, v in view.series["gpu_temp_c"][("node001", 3)]] == [95.0, 95.0, 95.0]
