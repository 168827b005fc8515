"""Texts that must not mislead: a start's catch-up, a GPU the node does not have."""

from __future__ import annotations

from fleetwatch.dashboards import data, node, summary_strip
from tests.dashboards.fakes import NOW


def test_old_data_does_not_say_the_processor_stopped_while_it_may_be_catching_up() -> None:
    view = data.FleetView((), (), last_ms=int((NOW - 720) * 1000))
    text = summary_strip.no_data_text(view, NOW)
    assert "12 min ago" in text and "processor stopped" not in text
    assert "catches up" in text


def test_a_gpu_the_node_does_not_report_is_said() -> None:
    assert node.no_gpu_text("node-001", 99, list(range(8))) == (
        "node-001 has no GPU 99 in the range: it reports GPUs 0, 1, 2, 3, 4, 5, 6, 7")
