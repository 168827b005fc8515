"""The peer rule's sequential test: a GPU held a few degrees over its peers, sample after
sample, adds up to gpu_hot_vs_peers before it crosses the fixed margin; a step of a sample
or two, or a GPU just under the allowance for as long as it likes, does not."""

from __future__ import annotations

import dataclasses

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.peers import ThermalPeers
from tests.models.test_peers import base, run

HOT = "gpu_hot_vs_peers"


def held(excess_c: float, seconds: float, config: DetectorsConfig | None = None) -> list:
    """GPU 0 like its peers for 15 minutes (learned), then ``excess_c`` over them."""
    d = ThermalPeers(config)
    assert run(d, base, 900) == []
    return run(d, lambda t: [base(t)[0] + excess_c] + base(t)[1:], seconds, start=900)


def test_a_gpu_held_under_the_margin_but_over_the_allowance_pages_once_the_sum_is_reached(
) -> None:
    c = DetectorsConfig()
    excess = c.peer_drift_allow_c + 1.0          # 4.5 °C: under peer_margin_c (5)
    assert excess < c.peer_margin_c
    found = [f for f in held(excess, 600) if f.rule == HOT]
    assert found and {f.gpu for f in found} == {0}
    # 1 °C over the allowance adds peer_drift_sum_c_min (2 °C x min) in two minutes
    first = found[0].ts - 900
    assert 100 <= first <= 150
    assert found[0].for_s == c.peer_for_s


def test_the_same_excess_with_the_test_off_is_not_paged() -> None:
    c = dataclasses.replace(DetectorsConfig(), peer_drift_sum_c_min=0.0)
    assert [f for f in held(c.peer_drift_allow_c + 1.0, 600, c) if f.rule == HOT] == []


def test_a_gpu_just_under_the_allowance_for_an_hour_is_not_paged() -> None:
    c = DetectorsConfig()
    assert held(c.peer_drift_allow_c - 0.5, 3600) == []


def test_a_step_of_two_samples_over_the_allowance_adds_too_little_to_page() -> None:
    d = ThermalPeers()
    assert run(d, base, 900) == []
    step = lambda t: [base(t)[0] + (4.5 if t < 910 else 0.0)] + base(t)[1:]  # noqa: E731
    assert run(d, step, 600, start=900) == []


def test_the_sum_clears_once_the_gpu_is_back_among_its_peers() -> None:
    d = ThermalPeers()
    run(d, base, 900)
    hot = lambda t: [base(t)[0] + 4.5] + base(t)[1:]            # noqa: E731
    assert run(d, hot, 300, start=900)
    # capped at twice the threshold: back among its peers it drains within a minute
    after = run(d, base, 600, start=1200)
    assert after and max(f.ts for f in after) < 1200 + 60
    assert float(d.table["drift"].max()) == 0.0


def _creeping(config: DetectorsConfig, hours: float = 6.0, top_c: float = 5.0) -> list:
    """GPU 0 like its peers for 15 minutes, then its heat path degrades: it creeps up to
    ``top_c`` over them, linearly over ``hours``, at steady power (under the margin)."""
    d = ThermalPeers(config)
    assert run(d, base, 900) == []
    span = hours * 3600.0
    creep = lambda t: [base(t)[0] + top_c * min(1.0, (t - 900) / span)] + base(t)[1:]  # noqa: E731
    # every 15 s (the evaluation's interval): six hours of samples
    return [f for f in run(d, creep, span, start=900, step=15.0) if f.rule == HOT]


def test_a_heat_path_that_degrades_over_hours_is_not_learned_away_as_the_gpus_own_offset(
) -> None:
    # 5 °C over its peers at the end of 6 h: learned as its own offset at a forgetting of
    # hours (the offset trails the creep by the forgetting time x its rate), paged at a day's.
    found = _creeping(DetectorsConfig())
    assert found and {f.gpu for f in found} == {0}
    assert found[0].evidence["excess_sum_c_min"] > DetectorsConfig().peer_drift_sum_c_min
    short = dataclasses.replace(DetectorsConfig(), peer_offset_forget_s=4 * 3600.0)
    assert _creeping(short) == []
