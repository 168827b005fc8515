"""Figure builders as pure functions: records in, figure out, no browser."""

from __future__ import annotations

from fleetwatch.dashboards import figures, theme
from fleetwatch.dashboards.data import GpuCell
from fleetwatch.pipeline.store.base import Annotation
from tests.dashboards.fakes import NOW, alert


def cell(node: str, gpu: int, temp: float, rack: str = "rack-00", power: float | None = 300.0,
         util: float | None = 90.0, job: str | None = None) -> GpuCell:
    return GpuCell(rack, node, gpu, temp, int(NOW * 1000), power, util, job, cluster="sim")


# rack-01 is listed first and GPU 1 of node-b is missing: the builder must sort and leave a gap.
CELLS = [
    cell("node-c", 0, 61, rack="rack-01"), cell("node-c", 1, 62, rack="rack-01"),
    cell("node-a", 0, 55), cell("node-a", 1, 91, job="4000001"),
    cell("node-b", 0, 70, power=None, util=None),
]


def heatmap_trace(fig):
    (trace,) = [t for t in fig.data if t.type == "heatmap"]
    return trace


def top_down(values) -> list:
    """A heatmap's rows as the screen shows them: plotly draws the first row at the bottom."""
    return list(reversed(list(values)))


def row(trace, node: str) -> int:
    return list(trace.y).index(node)


def alert_shapes(fig) -> dict[str, object]:
    return {s.name: s for s in fig.layout.shapes if (s.name or "").startswith("alert:")}


def test_units_come_from_the_catalogue() -> None:
    assert figures.unit("gpu_temp_c") == "°C"
    assert figures.unit("gpu_power_w") == "W"
    assert figures.unit("gpu_util_pct") == "%"
    assert figures.fmt("gpu_power_w", 301.4) == "301 W"
    assert figures.fmt("gpu_util_pct", None) == "n/a"


def test_heatmap_rows_are_nodes_by_rack_and_columns_gpus() -> None:
    trace = heatmap_trace(figures.fleet_heatmap(CELLS))
    assert top_down(trace.y) == ["node-a", "node-b", "node-c"]
    assert list(trace.x) == ["GPU 0", "GPU 1"]
    assert [list(r) for r in top_down(trace.z)] == [[55, 91], [70, None], [61, 62]]
    # The order is in the data, not in an axis setting a kept uirevision could drop.
    assert figures.fleet_heatmap(CELLS).layout.yaxis.autorange is True
    # Fixed bounds: a colour means the same temperature on every refresh.
    assert (trace.zmin, trace.zmax) == (theme.TEMP_MIN_C, theme.TEMP_MAX_C)
    assert trace.colorbar.title.text == "°C"


def test_heatmap_labels_racks() -> None:
    fig = figures.fleet_heatmap(CELLS)
    labels = {a.text: a.y for a in fig.layout.annotations}
    trace = heatmap_trace(fig)
    # Each rack's name halfway along its rows: rack-00 (node-a, node-b) on top.
    assert labels == {"rack-00": (row(trace, "node-a") + row(trace, "node-b")) / 2,
                      "rack-01": row(trace, "node-c")}


def test_heatmap_hover_has_readings_units_and_job() -> None:
    trace = heatmap_trace(figures.fleet_heatmap(CELLS))
    hot = figures.hover_text(trace, row(trace, "node-a"), 1)
    assert "node-a · GPU 1" in hot and "91°C" in hot and "300 W" in hot and "90%" in hot
    assert "job  4000001" in hot
    blind = figures.hover_text(trace, row(trace, "node-b"), 0)
    assert "power  n/a" in blind and "utilization  n/a" in blind and "job" not in blind


def test_heatmap_job_override() -> None:
    trace = heatmap_trace(figures.fleet_heatmap(CELLS, jobs={("sim", "node-c", 0): "train-7"}))
    assert "job  train-7" in figures.hover_text(trace, row(trace, "node-c"), 0)


def test_active_alerts_mark_their_cells() -> None:
    alerts = [alert("node-a", 1, "firing"), alert("node-c", 0, "pending"),
              alert("node-b", 0, "resolved"), alert("node-a", None, "firing")]
    fig = figures.fleet_heatmap(CELLS, alerts)
    shapes = alert_shapes(fig)
    assert set(shapes) == {"alert:node-a/gpu1:firing", "alert:node-c/gpu0:pending"}
    firing = shapes["alert:node-a/gpu1:firing"]
    trace = heatmap_trace(fig)
    # The outline sits exactly on the cell: column 1, node-a's row.
    a = row(trace, "node-a")
    assert (firing.x0, firing.x1, firing.y0, firing.y1) == (0.5, 1.5, a - 0.5, a + 0.5)
    assert shapes["alert:node-c/gpu0:pending"].line.color == theme.PENDING
    text = top_down(trace.text)
    assert text[0][1] == "▲ 91" and text[2][0] == "▲ 61" and text[1][0] == "70"
    assert "alert firing" in figures.hover_text(trace, a, 1)


def test_firing_wins_over_pending_on_the_same_gpu() -> None:
    marks = figures.active_marks([alert("n", 1, "pending"), alert("n", 1, "firing", rule="x")])
    assert marks[("sim", "n", 1)].state == "firing"


def test_alert_on_a_quiet_gpu_marks_its_empty_cell_and_off_grid_alerts_draw_nothing() -> None:
    # node-b GPU 1 has a place in the grid but no reading: a silent GPU keeps its alert,
    # and the outline tells the operator where. A node with no cells has no row to mark.
    fig = figures.fleet_heatmap(CELLS, [alert("node-b", 1, "firing"), alert("ghost", 0)])
    assert set(alert_shapes(fig)) == {"alert:node-b/gpu1:firing"}


def test_no_data_is_said_not_blank() -> None:
    fig = figures.fleet_heatmap([], [alert("node-a", 1)])
    assert not fig.data
    # Wrapped to lines that fit the panel (plotly does not wrap text itself).
    assert [a.text.replace("<br>", " ") for a in fig.layout.annotations] == [figures.NO_DATA]
    assert fig.layout.xaxis.visible is False


def test_node_figure_one_line_per_gpu_alerting_gpu_in_red() -> None:
    start, end = int((NOW - 3600) * 1000), int(NOW * 1000)
    series = {0: [(start + 1000, 60.0), (start + 16000, 61.0)],
              3: [(start + 1000, 80.0), (start + 16000, 88.0)]}
    fault = Annotation("cooling", NOW - 1800, NOW + 600, "node-a", "gpu3", "injected")
    fig = figures.node_metric_figure("gpu_temp_c", "Temperature", series, start, end,
                                     [fault], [alert("node-a", 3, "firing")])
    assert [t.name for t in fig.data] == ["GPU 0", "GPU 3"]
    assert list(fig.data[1].y) == [80.0, 88.0]
    assert fig.data[1].line.color == theme.FIRING and fig.data[0].line.color != theme.FIRING
    assert fig.layout.yaxis.title.text == "Temperature (°C)"
    names = [s.name for s in fig.layout.shapes]
    assert "annotation:cooling:gpu3" in names and "fired:gpu3" in names
    assert any("cooling · gpu3" in a.text for a in fig.layout.annotations)
    # The fault runs past the window's end; its shading stops at the edge.
    (band,) = [s for s in fig.layout.shapes if s.name == "annotation:cooling:gpu3"]
    assert band.x1 == figures.utc(end)


def test_secondary_node_figure_has_no_legend_or_labels() -> None:
    start, end = int((NOW - 3600) * 1000), int(NOW * 1000)
    fault = Annotation("cooling", NOW - 1800, None, "node-a", "gpu3", "injected")
    fig = figures.node_metric_figure("gpu_power_w", "Power", {3: [(start, 300.0)]}, start, end,
                                     [fault], primary=False)
    assert fig.layout.showlegend is False and not fig.layout.annotations
    assert fig.layout.yaxis.title.text == "Power (W)"


def test_node_figure_without_data_says_so() -> None:
    fig = figures.node_metric_figure("gpu_power_w", "Power", {}, 0, 1)
    assert not fig.data and "No power data" in fig.layout.annotations[0].text


HOSTILE = "<img src=x onerror=alert(1)>"


def test_names_and_texts_from_agents_are_escaped_for_plotly() -> None:
    cells = [cell(HOSTILE, 0, 91, rack="<b>r</b>"), cell("a/b?c#d", 0, 60)]
    evil = alert(HOSTILE, 0, "firing")
    fig = figures.fleet_heatmap(cells, [evil])
    trace = heatmap_trace(fig)
    assert "&lt;img src=x onerror=alert(1)&gt;" in list(trace.y)
    assert all("<img" not in str(y) for y in trace.y)
    hover = figures.hover_text(trace, row(trace, figures.esc(HOSTILE)), 0)
    assert "<img" not in hover and "&lt;img src=x onerror=alert(1)&gt; · GPU 0" in hover
    assert "<b>r</b>" not in str(fig.layout.annotations)
    # A click on the row gives the escaped label back: the real name is recovered.
    assert figures.node_from_label(figures.esc(HOSTILE)) == HOSTILE


def test_quotes_in_names_are_shown_as_written() -> None:
    name = '<a href="javascript:alert(2)">n1</a>'
    assert figures.esc(name) == '&lt;a href="javascript:alert(2)"&gt;n1&lt;/a&gt;'
    assert figures.esc("o'neil") == "o'neil"
    fig = figures.fleet_heatmap([cell(name, 0, 60)], [])
    assert '&lt;a href="javascript:alert(2)"&gt;n1&lt;/a&gt;' in list(heatmap_trace(fig).y)
    assert figures.node_from_label(figures.esc(name)) == name


def test_node_figure_draws_the_limit_and_brings_the_focused_gpu_forward() -> None:
    start, end = int((NOW - 3600) * 1000), int(NOW * 1000)
    series = {0: [(start + 1000, 60.0)], 3: [(start + 1000, 80.0)], 5: [(start + 1000, 70.0)]}
    fault = Annotation("cooling", NOW - 1800, None, "n", "gpu3", "<script>x</script>")
    fig = figures.node_metric_figure("gpu_temp_c", "Temperature", series, start, end, [fault],
                                     limit=85.0, focus=3)
    (line,) = [s for s in fig.layout.shapes if s.name == "limit:gpu_temp_c"]
    assert (line.y0, line.y1) == (85.0, 85.0)
    assert any("limit 85 °C" in (a.text or "") for a in fig.layout.annotations)
    assert all("<script>" not in (a.text or "") for a in fig.layout.annotations)
    assert fig.data[-1].name == "GPU 3" and fig.data[-1].opacity == 1.0
    assert {t.opacity for t in fig.data[:-1]} == {0.35}


def test_a_gpu_silent_for_30_minutes_is_a_gap_in_its_line_not_a_straight_slope() -> None:
    # XID 79 at 03:12: the GPU fell off the bus and reported nothing until 03:42.
    t0 = int(NOW * 1000) - 3_600_000
    before = [(t0 + i * 15_000, 49.0) for i in range(20)]
    after = [(before[-1][0] + 1_800_000 + i * 15_000, 26.0) for i in range(20)]
    steady = [(t0 + i * 15_000, 40.0) for i in range(160)]
    fig = figures.node_metric_figure("gpu_temp_c", "Temperature", {2: before + after, 3: steady},
                                     t0, int(NOW * 1000))
    lost, = [t for t in fig.data if t.name == "GPU 2"]
    ys = list(lost.y)
    assert ys.count(None) == 1 and ys.index(None) == 20 and len(ys) == 41
    assert lost.connectgaps is False
    assert ys[19] == 49.0 and ys[21] == 26.0
    other, = [t for t in fig.data if t.name == "GPU 3"]
    assert None not in list(other.y)  # a steady series, and a missed sample or two, stay whole
    assert figures.with_gaps([(0, 1.0), (15_000, 1.0), (45_000, 2.0), (60_000, 2.0)]) == (
        [0, 15_000, 45_000, 60_000], [1.0, 1.0, 2.0, 2.0])
