"""While `up` catches up, the page's "refreshed" time (and the alert ages, counted from the
same "now") is simulated: the stamp, which every page shows, says so until the clock is back
on wall time (hunt2 #6)."""

from __future__ import annotations

from dashboards.components import updated_stamp


def test_the_stamp_says_simulated_time_while_behind_the_wall_clock() -> None:
    wall = 1_800_000_000.0
    behind = updated_stamp(wall - 255, wall)
    assert behind.startswith("refreshed ") and "UTC · simulated time, catching up (4 min " \
        "behind the wall clock; ages count from it)" in behind
    assert "simulated" in updated_stamp(wall - 30, wall)
    assert updated_stamp(wall - 1, wall).endswith(" UTC")      # back on wall time
    assert updated_stamp(wall, wall).endswith(" UTC")
