"""A lemon is a node whose own trouble recurs: one heat incident (its rack's cooler failing,
its GPUs flapping at their slowdown temperature for minutes) is not a repeat offender."""

from __future__ import annotations

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.models.lemon import LemonScore
from fleetwatch.models.lemon_points import THERMAL_SLOWDOWN_POINTS
from fleetwatch.models.rack import RackCooling
from fleetwatch.wiring import linked

T0 = 1_800_000_000.0
DAY = 86400.0
HOT = float(THROTTLE_FLAGS["hw_thermal_slowdown"])


def frame(ts: float, hot: set[int], node: str = "n1", xids: dict[int, tuple[int, ...]] | None
          = None) -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{node}-{i}", "H100",
                            {"gpu_temp_c": 90.0, "gpu_throttle_reasons": HOT if i in hot else 0.0},
                            None, "ok", (xids or {}).get(i, ())) for i in range(8))
    return Frame("c", "r", node, ts, gpus, HostReading())


def flap(lemon: LemonScore, start: float, minutes: float = 7.0) -> list:
    """Each GPU in and out of its thermal slowdown every 10 s, for ``minutes``."""
    found, t = [], start
    while t < start + 60.0 * minutes:
        k = int((t - start) // 5)
        found += lemon.update([frame(t, {g for g in range(8) if (k + g) % 2})])
        t += 5.0
    return found


def test_one_heat_incident_of_minutes_is_one_incident_not_a_lemon() -> None:
    lemon = LemonScore(threshold=10.0)
    assert flap(lemon, T0) == []
    assert lemon.score("c", "n1", T0 + 420) <= THERMAL_SLOWDOWN_POINTS


def test_slowdowns_under_a_rack_cooling_finding_do_not_count() -> None:
    lemon = LemonScore(threshold=10.0, explained=lambda cluster, rack, node: rack == "r")
    flap(lemon, T0)
    assert lemon.score("c", "n1", T0 + 420) == 0.0


def test_a_burst_of_hardware_trouble_within_a_day_is_not_yet_a_repeat_offender() -> None:
    lemon = LemonScore(threshold=10.0)
    # Three XID 79 incidents (15 points) within three hours: one bad night.
    found = []
    for k in range(3):
        found += lemon.update([frame(T0 + 3600 * k, set(), xids={k: (79,)})])
    assert found == [] and lemon.score("c", "n1", T0 + 7200) >= 10.0
    # The trouble comes back the next day: now it recurs.
    found = lemon.update([frame(T0 + DAY + 7200, set(), xids={4: (79,)})])
    assert [f.rule for f in found] == ["lemon_node"]
    assert "over 1.1 days" in found[0].message


def test_the_wiring_tells_the_lemon_score_about_the_rack_detector() -> None:
    from fleetwatch.models.learned import LearnedDetectors

    rack, learned = RackCooling(), LearnedDetectors("/nonexistent-models")
    linked([rack, learned])
    assert learned.lemon.explained is not None
    assert learned.lemon.explained("c", "r", "n1") is False
