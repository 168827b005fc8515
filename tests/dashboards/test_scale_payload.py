"""What a refresh sends at 1,000 nodes x 8 GPUs, quiet and in an alert storm: bounded by the
fleet's size and the table caps, not by how many alerts fired (a storm's 1,050 alerts were
2 MB a refresh on both pages, and 8,000 GPUs' tooltips 1 MB)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import dash
import pytest
from dash.testing.wait import until
from plotly.utils import PlotlyJSONEncoder

from fleetwatch.dashboards import alert_tables, create_app, figures, fleet
from fleetwatch.dashboards import alerts as alerts_page
from fleetwatch.dashboards.data import FleetView, GpuCell
from tests.dashboards.conftest import SimFleet
from tests.dashboards.fakes import NOW, alert
from tests.dashboards.test_alert_table import rows
from tests.dashboards.test_data import text_of


def sent(*values: Any) -> int:
    """Bytes of JSON Dash sends for ``values`` (it encodes with plotly's encoder)."""
    return len(json.dumps(values, cls=PlotlyJSONEncoder))


def gpus(nodes: int = 1000, per_rack: int = 16) -> tuple[GpuCell, ...]:
    return tuple(GpuCell(f"rack-{n // per_rack:02d}", f"node-{n:03d}", g,
                         40.123456 + (n + g) % 50, int(NOW * 1000), 301.23456, 88.7654321,
                         cluster="sim")
                 for n in range(nodes) for g in range(8))


def storm(n: int = 1050) -> list:
    return [alert(f"node-{i // 8:03d}", i % 8, "firing", rule="gpu_hw_slowdown")
            if i < 1000 else alert(f"node-{i:03d}", None, "firing", rule="node_silent")
            for i in range(n)]


def test_the_active_table_is_capped_and_says_how_many_more_of_which_rules() -> None:
    table = alert_tables.alert_table(storm(), NOW, "t", limit=alert_tables.ACTIVE_SHOWN)
    shown = rows(table)
    assert len(shown) == alert_tables.ACTIVE_SHOWN == 100
    assert getattr(shown[0], "data-node") == "node-000"  # the first of the order given
    more = text_of(table).split("and ")[-1]
    assert more.startswith("950 more active: 900 gpu_hw_slowdown, 50 node_silent")
    assert "`fleetwatch alerts` lists them all" in more
    assert sent(table) < 250_000  # 1,050 rows were ~2 MB


def test_a_table_within_the_cap_is_whole_and_says_nothing_more() -> None:
    some = storm(alert_tables.ACTIVE_SHOWN)
    table = alert_tables.alert_table(some, NOW, "t", limit=alert_tables.ACTIVE_SHOWN)
    assert len(rows(table)) == 100 and "more active" not in text_of(table)


def test_the_alerts_page_caps_its_active_table_in_a_storm() -> None:
    active, resolved = alerts_page.tables(storm(), [], NOW, "24h", {})
    assert len(rows(active)) == alert_tables.ACTIVE_SHOWN
    assert "950 more active" in text_of(active)
    assert sent(active, resolved) < 250_000


def test_the_fleet_page_at_8000_gpus_in_a_storm_is_bounded_and_counts_every_alert() -> None:
    view = FleetView(gpus(), tuple(storm()))
    summary, fig, table, notice = fleet.parts(view, NOW, None, {})
    assert notice is None and len(rows(table)) == alert_tables.FLEET_SHOWN
    assert "1050" in text_of(summary)  # the tiles count them all
    # Every alerted GPU keeps its outline on the heatmap (bounded by the fleet, not a cap).
    assert sum(1 for s in fig.layout.shapes if s.type == "rect") == 1000
    assert sent(summary, fig, table) < 1_100_000  # was 3.4 MB


def test_8000_gpus_tooltips_are_compact_and_say_what_they_said() -> None:
    fig = figures.fleet_heatmap(gpus(), [alert("node-000", 1, "firing")])
    assert sent(fig) < 700_000  # 1.2 MB with a whole tooltip per cell
    trace = fig.data[0]
    top = len(trace.y) - 1  # node-000, drawn on top
    assert figures.hover_text(trace, top, 0) == (
        "<b>node-000 · GPU 0</b>  (rack-00)<br>temperature  40°C<br>power  301 W<br>"
        "utilization  89%<br>no active alert")
    assert figures.hover_text(trace, top, 1).endswith(
        "<b>alert firing</b>: GPU 1 on node-000 at 90 °C")


def test_a_fleet_refresh_sends_only_the_heatmap_or_table_that_changed() -> None:
    view = FleetView(gpus(100), tuple(storm(300)))
    _, fig, table, _ = fleet.parts(view, NOW, None, {})
    first, on_screen = fleet.unsent((fig, table), None)
    assert first == (fig, table)  # a page just drawn gets both
    again, same = fleet.unsent(fleet.parts(view, NOW, None, {})[1:3], on_screen)
    assert again == (dash.no_update, dash.no_update) and same == on_screen
    # New readings: the heatmap goes, the unchanged alert table does not.
    warmer = FleetView(tuple(dataclasses.replace(c, temp_c=c.temp_c + 1) for c in view.cells),
                       view.alerts)
    _, fig2, table2, _ = fleet.parts(warmer, NOW, None, {})
    sent_now, _ = fleet.unsent((fig2, table2), on_screen)
    assert sent_now[0] is fig2 and sent_now[1] is dash.no_update


_HOVER_JS = """
const gd = document.querySelector('#fleet-heatmap .js-plotly-plot');
if (!gd || !gd.data || !gd.data.length || !gd.data[0].z) return null;
const rows = gd.data[0].z.length;
Plotly.Fx.hover(gd, {xval: 3, yval: rows - 1});
const box = gd.querySelector('.hoverlayer');
return box ? box.textContent : null;"""


@pytest.mark.browser
def test_the_heatmaps_tooltip_is_drawn_whole_in_the_browser(dash_duo, sim_fleet: SimFleet
                                                             ) -> None:
    dash_duo.start_server(create_app(sim_fleet.reader(), refresh_s=2.0))
    dash_duo.wait_for_element("#fleet-heatmap .hm, #fleet-heatmap .heatmaplayer", timeout=15)
    # node-000's GPU 3: the top row, once the first refresh has drawn the fleet.
    shown = until(lambda: dash_duo.driver.execute_script(_HOVER_JS), timeout=15)
    # The simulated fleet's A100s: the part its frames name, beside the rack.
    assert shown and "node-000 · GPU 3" in shown and "(rack-00 · A100-SXM4-80GB)" in shown, shown
    for line in ("temperature  ", "°C", "power  ", " W", "utilization  ", "%"):
        assert line in shown, (line, shown)
    assert "customdata" not in shown and "%{" not in shown
    assert dash_duo.get_logs() == []
