"""How fast `up`'s simulated clock runs while an alert is pending: slow enough that two
refreshes of the page show it pending, and never slowed where it cannot be shown."""

from __future__ import annotations

from fleetwatch.config import load
from fleetwatch.simclock import LEAD_TICKS, pending_pace


def test_the_rest_of_the_for_duration_lasts_two_refreshes() -> None:
    config = load(env={"FLEETWATCH_DASHBOARD_REFRESH_S": "5"})
    rest = min(config.detectors.peer_for_s, config.detectors.high_for_s) - LEAD_TICKS * 5.0
    assert pending_pace(config, 30.0, 5.0) == rest / 10.0
    assert pending_pace(config, 1.5, 5.0) == 1.5          # never faster than asked


def test_an_alert_that_fires_within_the_agents_lead_does_not_stall_the_clock() -> None:
    """At 15 s samples the agent runs two ticks (30 s) ahead: a 30 s for-duration ends
    before the processor could show it pending. The clock had crawled at 1x."""
    config = load(env={"FLEETWATCH_DASHBOARD_REFRESH_S": "0.5"})
    assert pending_pace(config, 3000.0, 15.0) == 3000.0
