"""The fleet heatmap's tooltip names each GPU's part: a fleet of A100s, H100s and L40S on one
temperature scale, a node mixing parts, are told apart, from the boards their frames named."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.dashboards import data, figures, fleet
from fleetwatch.dashboards.fleet_parts import FleetParts
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.test_node_temp_limits import A100, L40S, NOW, fill


def tooltips(store: SqliteStore, parts: FleetParts, now: float) -> dict[tuple[str, str], str]:
    view = data.read_fleet(store, now)
    _, fig, _, _ = fleet.parts(view, now, None, {}, {}, parts.read(store, now))
    trace = fig.data[0]
    return {(trace.y[i], trace.x[j]): figures.hover_text(trace, i, j)
            for i in range(len(trace.y)) for j in range(len(trace.x))
            if trace.customdata[i][j] is not None}


def test_each_gpus_tooltip_names_its_part(tmp_path: Path) -> None:
    fill(tmp_path / "s.db", "mix-00", [A100, A100, L40S])
    fill(tmp_path / "s.db", "l40s-00", [L40S])
    store = SqliteStore(tmp_path / "s.db", read_only=True)
    parts = FleetParts()
    tips = tooltips(store, parts, NOW)
    assert "(r1 · A100-SXM4-80GB)" in tips[("mix-00", "GPU 0")]
    assert "(r1 · L40S)" in tips[("mix-00", "GPU 2")]
    assert "(r1 · L40S)" in tips[("l40s-00", "GPU 0")]
    # A later refresh reads only the newest events, and keeps the parts read before.
    again = tooltips(store, parts, NOW + 30)
    assert again[("mix-00", "GPU 0")] == tips[("mix-00", "GPU 0")]


def test_a_store_without_events_gives_no_part() -> None:
    from tests.dashboards.fakes import FakeStore

    assert FleetParts().read(FakeStore(), NOW) == {}
