"""Names in hover text are data, never part of plotly's hover template: a node or cluster
named with "%{...}" would otherwise be read by plotly as a field of its own (a node
"n%{y}" showed the value where its name should be)."""

from __future__ import annotations

from fleetwatch.dashboards.energy_figures import idle_share, per_hour
from fleetwatch.dashboards.job_figures import job_figure

ODD = "n%{y}<b>"


def test_a_job_figures_node_names_are_not_in_its_hover_template() -> None:
    fig = job_figure("gpu_temp_c", "Temperature", {(ODD, 0): [(1_000, 60.0), (2_000, 61.0)]},
                     0, 3_000, [], primary=True)
    trace = fig.data[0]
    assert ODD not in trace.hovertemplate and "%{meta}" in trace.hovertemplate
    assert trace.meta == "n%{y}&lt;b&gt; · GPU 0"


def test_energy_figures_cluster_names_are_not_in_their_hover_templates() -> None:
    hours = [0, 3600]
    figs = [per_hour(hours, {ODD: [1.0, 2.0]}, "kWh", 3600),
            idle_share(hours, {ODD: [0.5, 0.4]})]
    for fig in figs:
        for trace in fig.data:
            assert ODD not in trace.hovertemplate
            assert trace.meta == "n%{y}&lt;b&gt;"
