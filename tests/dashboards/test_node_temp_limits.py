"""The node page's temperature panel draws the slowdown temperatures the thermal rules judge
its GPUs by: NVML's where they report one, else their part's from the parts table, else
detectors.fallback_slowdown_c, said to be assumed; a line per part where a node mixes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.config import DetectorsConfig
from fleetwatch.dashboards import figures, node_data
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore

NOW = 1_763_800_000.0
A100, L40S, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA H100 80GB HBM3"


def fill(path: Path, node: str, models: list[str], nvml: set[int] = frozenset()) -> None:
    """Ten minutes of ``node``'s GPUs, those in ``nvml`` with NVML's slowdown 91 °C."""
    store = SqliteStore(path)
    frames = []
    for t in range(40):
        gpus = tuple(GpuReading(i, f"GPU-{node}-{i:04d}-fake", model,
                                {"gpu_temp_c": 60.0 + i, "gpu_power_w": 300.0,
                                 **({"gpu_slowdown_temp_c": 91.0, "gpu_shutdown_temp_c": 96.0}
                                    if i in nvml else {})}, "j1")
                     for i, model in enumerate(models))
        frames.append(Frame("c", "r1", node, NOW - 600 + 15 * t, gpus))
    Processor(store).process(frames)
    store.close()


def test_a_part_without_known_limits_draws_the_assumed_fallback(tmp_path: Path) -> None:
    fill(tmp_path / "s.db", "l40s-00", [L40S] * 4)
    view = node_data.read_node(SqliteStore(tmp_path / "s.db", read_only=True), "l40s-00", NOW)
    assert "gpu_temp_c" not in view.limits
    assert view.temp_lines == (node_data.LimitLine(
        87.0, "limit 87 °C assumed (detectors.fallback_slowdown_c)"),)
    fig = figures.node_metric_figure("gpu_temp_c", "Temperature",
                                     view.series["gpu_temp_c"], view.start_ms, view.end_ms,
                                     limit_lines=view.temp_lines)
    assert [(s.y0, a.text) for s, a in zip(fig.layout.shapes, fig.layout.annotations)] == [
        (87.0, "limit 87 °C assumed (detectors.fallback_slowdown_c)")]
    other = node_data.read_node(SqliteStore(tmp_path / "s.db", read_only=True), "l40s-00", NOW,
                           fallback_slowdown_c=80.0)
    assert other.temp_lines[0].value == 80.0


def test_a_node_mixing_parts_draws_a_line_per_part(tmp_path: Path) -> None:
    fill(tmp_path / "s.db", "mix-00", [A100, A100, L40S, L40S, H100, H100], nvml={4, 5})
    view = node_data.read_node(SqliteStore(tmp_path / "s.db", read_only=True), "mix-00", NOW)
    assert view.temp_lines == (
        node_data.LimitLine(87.0,
                            "limit 87 °C assumed (detectors.fallback_slowdown_c) · GPUs 2, 3"),
        node_data.LimitLine(89.0, f"limit 89 °C {A100}'s (parts table) · GPUs 0, 1"),
        node_data.LimitLine(91.0, "limit 91 °C · GPUs 4, 5"))
    assert "gpu_temp_c" not in view.limits


def test_gpus_reporting_their_own_keep_one_line_and_a_site_limit_wins(tmp_path: Path) -> None:
    fill(tmp_path / "s.db", "h100-00", [H100] * 2, nvml={0, 1})
    store = SqliteStore(tmp_path / "s.db", read_only=True)
    view = node_data.read_node(store, "h100-00", NOW)
    assert view.limits["gpu_temp_c"] == 91.0 and view.temp_lines == ()
    site = node_data.read_node(store, "h100-00", NOW, temp_limit_c=80.0)
    assert site.limits["gpu_temp_c"] == 80.0 and site.temp_lines == ()


def test_the_lines_are_the_limits_the_detectors_judge_by() -> None:
    """The same sources in the same order as models/thermal.py LimitTable."""
    import numpy as np

    from fleetwatch.models.batch import columns
    from fleetwatch.models.thermal import LimitTable

    frame = Frame("c", "r1", "n", NOW, tuple(
        GpuReading(i, f"GPU-n-{i}", m, {"gpu_temp_c": 60.0}, "j")
        for i, m in enumerate([A100, L40S])))
    b = columns([frame])
    slow, _ = LimitTable(DetectorsConfig()).limits(b, np.array([0]))
    lines = node_data.temp_limit_lines({}, {"gpu0": A100, "gpu1": L40S}, ["gpu0", "gpu1"],
                                  DetectorsConfig().fallback_slowdown_c)
    assert sorted(slow[0].tolist()) == [line.value for line in lines] == pytest.approx(
        [87.0, 89.0])


@pytest.mark.browser
def test_the_node_page_draws_each_parts_limit(dash_duo, tmp_path: Path) -> None:
    from dash.testing.wait import until

    from fleetwatch.dashboards import create_app

    fill(tmp_path / "s.db", "mix-00", [A100, A100, L40S, L40S])
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "s.db", read_only=True),
                                     clock=lambda: NOW))
    dash_duo.driver.get(dash_duo.server_url + "/node/mix-00")

    def texts() -> list[str]:
        return dash_duo.driver.execute_script(
            "return Array.from(document.querySelectorAll("
            "'#node-graph-gpu_temp_c .annotation-text')).map(e => e.textContent);")
    until(lambda: len(texts()) == 2, timeout=15)
    assert sorted(texts()) == [
        "limit 87 °C assumed (detectors.fallback_slowdown_c) · GPUs 2, 3",
        f"limit 89 °C {A100}'s (parts table) · GPUs 0, 1"]
    assert dash_duo.get_logs() == []
