"""The fleet heatmap of a big fleet (256 nodes x 8 GPUs, 128 racks): built in one pass
and of a height a page can hold."""

from __future__ import annotations

import time

import plotly.graph_objects as go
import pytest

from fleetwatch.dashboards import figures
from fleetwatch.dashboards.data import GpuCell
from tests.dashboards.fakes import NOW, alert


def fleet(nodes: int, gpus: int = 8, per_rack: int = 2) -> list[GpuCell]:
    return [GpuCell(f"rack-{n // per_rack:03d}", f"node-{n:03d}", g, 40.0 + (n + g) % 50,
                    int(NOW * 1000), 300.0, 90.0, None, cluster="sim")
            for n in range(nodes) for g in range(gpus)]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many annotation and shape objects plotly builds (each is validated)."""
    counts = {"annotation": 0, "shape": 0}
    for kind, cls in (("annotation", go.layout.Annotation), ("shape", go.layout.Shape)):
        init = cls.__init__

        def counted(self, *args, _kind=kind, _init=init, **kwargs):  # type: ignore[no-untyped-def]
            counts[_kind] += 1
            _init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counted)
    return counts


def test_rack_labels_and_rules_are_built_once_each(built: dict[str, int]) -> None:
    # One add_annotation/add_shape per rack re-validated every earlier one: 128 racks
    # built ~8,400 objects and took 9-30 s. Now each is built a bounded number of times.
    alerts = [alert("node-007", 3, "firing"), alert("node-200", 0, "pending")]
    fig = figures.fleet_heatmap(fleet(256), alerts)
    assert len(fig.layout.annotations) == 128  # a label per rack
    rules = [s for s in fig.layout.shapes if s.type == "line"]
    assert len(rules) == 127  # a rule between racks
    assert {s.name for s in fig.layout.shapes if s.type == "rect"} == {
        "alert:node-007/gpu3:firing", "alert:node-200/gpu0:pending"}
    assert built["annotation"] <= 3 * 128
    assert built["shape"] <= 3 * (127 + 2)


def test_a_big_fleet_builds_in_seconds() -> None:
    start = time.perf_counter()
    figures.fleet_heatmap(fleet(256))
    assert time.perf_counter() - start < 5.0  # was 9-33 s on the same fleet


def test_rows_shrink_for_a_big_fleet_but_stay_hoverable() -> None:
    small = figures.fleet_heatmap(fleet(4))
    assert small.layout.height == max(260, 70 + 52 * 4)  # small fleets unchanged
    assert small.data[0].texttemplate == "%{text}"
    big = figures.fleet_heatmap(fleet(256))
    assert big.layout.height <= 70 + 16 * 256  # was 70 + 52 * 256 = 13,382 px
    assert big.layout.height >= 70 + figures.row_px(256) * 256
    assert figures.row_px(256) >= 16
    # Too small for the value: the cell keeps its colour, the hover keeps the reading.
    assert big.data[0].texttemplate is None
    assert "node-000 · GPU 0" in figures.hover_text(big.data[0], -1, 0)
    # In between, rows shrink smoothly toward the cap.
    assert figures.row_px(40) == 52 and 16 < figures.row_px(80) < 52


def test_racks_and_nodes_in_natural_order() -> None:
    # As strings rack-10 < rack-100 < rack-11: the wall broke the room's order past 100 racks.
    names = ["rack-100", "rack-11", "rack-2", "rack-10", "rack-99"]
    assert sorted(names, key=figures.natural_key) == [
        "rack-2", "rack-10", "rack-11", "rack-99", "rack-100"]
    cells = [GpuCell(f"rack-{n // 2}", f"node-{n}", 0, 50.0, int(NOW * 1000), 300.0, 90.0,
                     None, cluster="sim") for n in range(210)]
    rows = list(figures.fleet_heatmap(cells).data[0].y)[::-1]  # the first node is on top
    assert rows[:3] == ["node-0", "node-1", "node-2"]
    assert rows.index("node-4") < rows.index("node-20") < rows.index("node-200")
    assert rows[-1] == "node-209"
