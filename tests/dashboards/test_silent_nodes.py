"""A node fleetwatch has declared silent (its ``node_silent`` alert fires) is not
"reporting" on the fleet page: not counted in the GPUs reporting, its last readings not the
hottest GPU, and its heatmap row covered and marked "silent since", while the rule's own
verdict (its threshold per node) is the one notion of "not reporting"."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.dashboards import components, data, figures, summary_strip
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.fakes import NOW, alert, point
from tests.dashboards.test_data import text_of


def _silent(node: str, since: float, state: str = "firing") -> Alert:
    a = alert(node, None, state, value=70, rule="node_silent", started_ago_s=NOW - since)
    return Alert(**{**{f: getattr(a, f) for f in a.__slots__}, "fired_ts": since,
                    "message": f"{node} has sent nothing for 70 s"})


def test_a_node_declared_silent_is_not_reporting() -> None:
    cells = data.fleet_cells([point("gpu_temp_c", "node-a", 0, 60, age_s=20),
                              point("gpu_temp_c", "node-b", 0, 95, age_s=70),
                              point("gpu_temp_c", "node-b", 1, 94, age_s=70)])
    view = data.fleet_view(cells, [_silent("node-b", NOW - 10)])
    assert view.silent == {("sim", "node-b"): NOW - 10}
    assert [c.node for c in view.reporting] == ["node-a"] and view.nodes == 1
    assert view.hottest is not None and view.hottest.node == "node-a"
    tiles = summary_strip.summary(view, NOW)
    assert text_of(tiles[0]).startswith("GPUs reporting 1 on 1 node")
    assert "1 node silent" in text_of(tiles[0])
    # A pending node_silent is not a verdict yet: the node still counts.
    assert data.fleet_view(cells, [_silent("node-b", NOW - 10, "pending")]).nodes == 2


def test_the_heatmap_covers_a_silent_nodes_row_and_says_since_when() -> None:
    cells = data.fleet_cells([point("gpu_temp_c", "node-a", 0, 60),
                              point("gpu_temp_c", "node-b", 0, 95, age_s=70)])
    since = NOW - 10
    fig = figures.fleet_heatmap(cells, silent={("sim", "node-b"): since})
    (cover,) = [s for s in fig.layout.shapes if (s.name or "").startswith("silent:")]
    assert cover.name == "silent:sim/node-b"
    said = [a.text for a in fig.layout.annotations if "silent since" in (a.text or "")]
    assert said == [f"silent since {components.clock(since)} UTC"]


def test_read_fleet_of_a_store_with_a_silent_node(tmp_path: Path) -> None:
    now = time.time()
    store = SqliteStore(tmp_path / "f.db")
    store.write([Frame("sim", "r1", node, now - age, (GpuReading(0, "GPU-0", "H100",
                                                                 {"gpu_temp_c": 60.0}),))
                 for node, age in (("node-a", 2), ("node-b", 90))])
    store.write_alerts([_silent("node-b", now - 30)])
    view = data.read_fleet(store, now)
    assert len(view.cells) == 2 and [c.node for c in view.reporting] == ["node-a"]
    assert text_of(summary_strip.summary(view, now)[0]).startswith("GPUs reporting 1 on 1 node")
