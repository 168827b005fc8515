"""A GPU whose job's phases take it under and back over its thermal limits within minutes
is one alert for as long as that goes on, not a page per phase (D5 of the noise audit)."""

from __future__ import annotations

from fleetwatch.models.thermal import ThermalLimits
from fleetwatch.models.throttle import Throttle
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node

LIMITS = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0}


def firings(phases: list[tuple[int, float]], rule: str) -> list[str]:
    """The ids of the ``rule`` alerts that fired on GPU 0 over (seconds, temperature)
    phases, sampled every 15 s, with the shipped 300 s keep-firing."""
    detectors = [ThermalLimits(), Throttle()]
    needs = {r: m for d in detectors for r, m in d.rules.items()}
    book = AlertBook(requirements=needs, keep_firing_s=300.0)
    ts, fired = 0.0, []
    for seconds, temp in phases:
        for _ in range(seconds // 15):
            ts += 15.0
            frames = [node(ts, [busy(temp, **LIMITS), busy(70.0, **LIMITS)])]
            found = [f for d in detectors for f in d.update(frames)]
            changes = book.observe(frames, found)
            book.apply(changes)
            fired += [a.id for a in changes if a.rule == rule and a.state == "firing"
                      and a.fired_ts == a.updated_ts]
    return fired


def test_a_hot_gpu_cooled_by_a_job_phase_for_ten_minutes_is_one_alert() -> None:
    # 20 min at 87 °C (2 °C under slowdown), 10 min of checkpoint at 78 °C, 20 min hot again.
    assert len(firings([(1200, 87.0), (600, 78.0), (1200, 87.0)], "gpu_temp_high")) == 1


def test_a_gpu_cool_for_an_hour_and_hot_again_is_a_new_alert() -> None:
    assert len(firings([(1200, 87.0), (3600, 70.0), (1200, 87.0)], "gpu_temp_high")) == 2
