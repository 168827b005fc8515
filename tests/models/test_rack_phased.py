"""Rack and node cooling on loads like an LLM job's, and on data without power.

``PhasedFleet`` is physics, not a recording: 8-GPU nodes under one job whose
phases (compute, all-reduce, input, checkpoint) last 2 to 60 s, each GPU's heat
sink following its power through a 23 s time constant over its rack's inlet air,
the die 0.024 °C/W above its sink. It is integrated every second and sampled every
``dt`` in whole degrees, so phases shorter than a sample are felt by the heat sink
and never seen in the power readings, as on a real node.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fleetwatch.config import AlertsConfig
from fleetwatch.frame import Frame, HostReading
from fleetwatch.models.rack import RackCooling
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node

# (share of phases, watts, shortest s, longest s): compute, all-reduce, input, checkpoint
PHASES = ((0.58, 690.0, 8.0, 20.0), (0.30, 130.0, 2.0, 6.0), (0.10, 250.0, 3.0, 10.0),
          (0.02, 110.0, 30.0, 60.0))
TAU_S, R_SINK, R_DIE = 23.0, 0.032, 0.024


class PhasedFleet:
    def __init__(self, racks: dict[str, list[str]], seed: int, power: bool = True,
                 inlet: bool = False, idle_until_s: float = 0.0) -> None:
        self.rng = np.random.default_rng(seed)
        self.racks = racks
        self.names = [(r, n) for r, nodes in racks.items() for n in nodes]
        shape = (len(self.names), 8)
        self.r_sink = R_SINK * self.rng.uniform(0.9, 1.1, shape)
        self.offset = self.rng.normal(0.0, 1.0, shape)
        self.sink = np.full(shape, 40.0)
        self.power = np.full(shape, 72.0)
        self.t, self.phase_end, self.watts = 0.0, 0.0, 72.0
        self.with_power, self.with_inlet, self.idle_until_s = power, inlet, idle_until_s

    def _phase(self) -> None:
        k = self.rng.choice(len(PHASES), p=[p[0] for p in PHASES])
        _, self.watts, lo, hi = PHASES[k]
        self.phase_end = self.t + self.rng.uniform(lo, hi)

    def frames(self, t: float, inlet_add: dict[str, float] | None = None) -> list[Frame]:
        """Advance to ``t`` a second at a time; the nodes' frames at ``t``."""
        add = np.array([(inlet_add or {}).get(r, 0.0) for r, _ in self.names])[:, None]
        air = 24.0 + 0.5 * math.sin(t / 3600.0) + add
        while self.t < t:
            self.t += 1.0
            if self.t >= self.phase_end:
                self._phase()
            watts = 72.0 if self.t < self.idle_until_s else self.watts
            self.power = np.clip(watts * self.rng.uniform(0.95, 1.04, self.sink.shape)
                                 + self.rng.normal(0.0, 8.0, self.sink.shape), 60.0, 700.0)
            target = air + self.offset + self.r_sink * self.power
            self.sink += (target - self.sink) * -math.expm1(-1.0 / TAU_S)
        die = np.round(self.sink + R_DIE * self.power)
        out = []
        for i, (rack, name) in enumerate(self.names):
            gpus = [busy(float(die[i, g]), round(float(self.power[i, g]), 1))
                    for g in range(8)]
            if not self.with_power:
                gpus = [{"gpu_temp_c": m["gpu_temp_c"]} for m in gpus]
            f = node(t, gpus, name=name, rack=rack)
            if self.with_inlet:
                f = replace(f, host=HostReading({"host_inlet_temp_c": round(float(air[i, 0]), 2)}))
            out.append(f)
        return out


def run(fleet: PhasedFleet, d: RackCooling, start: float, end: float, dt: float,
        add=lambda t: {}) -> list[tuple[str, str, str, float]]:  # noqa: ANN001
    found = []
    t = start
    while t < end:
        found += [(f.rule, f.rack, f.node, f.ts) for f in d.update(fleet.frames(t, add(t)))]
        t += dt
    return found


TWO_RACKS = {"rack-00": ["node-000", "node-001"], "rack-01": ["node-002", "node-003"]}


def test_temperature_only_gpus_are_not_judged_against_a_power_model() -> None:
    """No power in the data: the GPUs warm as the job starts, which no model of their power
    can tell from a cooling loss. They are not judged, and the coverage says so."""
    fleet = PhasedFleet({"rack-00": ["node-000", "node-001"]}, seed=1, power=False,
                        idle_until_s=2400.0)
    d = RackCooling()
    assert run(fleet, d, 0.0, 2 * 3600.0, 15.0) == []
    cov = d.coverage()
    given = 16 * len(range(0, 2 * 3600, 15))
    assert cov == {"rack_cooling": (0, given), "node_cooling": (0, given)}


def test_temperature_only_gpus_with_inlet_sensors_are_judged_by_their_air() -> None:
    fleet = PhasedFleet(TWO_RACKS, seed=2, power=False, inlet=True)
    d = RackCooling()
    onset = 3600.0
    found = run(fleet, d, 0.0, 2 * 3600.0, 15.0,
                lambda t: {"rack-00": min(15.0, max(0.0, (t - onset) / 60 * 2.0))})
    assert found and {(r, rack) for r, rack, _, _ in found} == {("rack_cooling", "rack-00")}
    assert min(ts for *_, ts in found) - onset <= 120
    judged, given = d.coverage()["rack_cooling"]
    assert 0 < judged < given


@pytest.mark.parametrize(("dt", "seed"), [(5.0, 1), (15.0, 2), (15.0, 3), (60.0, 4)])
def test_a_rack_that_stays_hot_under_phased_load_stays_found(dt: float, seed: int) -> None:
    """rack-00's air warms by 2 °C a minute from 45 minutes in and stays 15 °C up for an
    hour. Its power changes every few seconds, so its GPUs are never settled. Through the
    alert lifecycle (as the processor runs it): one rack alert, firing within minutes and
    still firing an hour later; no node alert."""
    fleet, d = PhasedFleet(TWO_RACKS, seed=seed), RackCooling()
    book = AlertBook(keep_firing_s=AlertsConfig().keep_firing_s)
    onset, end = 2700.0, 2700.0 + 3600.0
    changes, t = [], 0.0
    while t < end:
        frames = fleet.frames(t, {"rack-00": min(15.0, max(0.0, (t - onset) / 60 * 2.0))})
        now = book.observe(frames, d.update(frames))
        book.apply(now)
        changes += [(a.rule, a.rack, a.state, a.updated_ts) for a in now]
        t += dt
    fired = [(rule, rack, ts) for rule, rack, state, ts in changes if state == "firing"]
    assert {(rule, rack) for rule, rack, _ in fired} == {("rack_cooling", "rack-00")}
    assert fired[0][2] - onset <= 10 * 60
    assert [c for c in changes if c[2] == "resolved"] == []
    open_now = [a for a in book.open if a.rule == "rack_cooling"]
    assert [a.state for a in open_now] == ["firing"]
    judged, given = d.coverage()["rack_cooling"]
    assert judged > 0.6 * given  # all but the warm-up and the powers not learned yet


def test_a_rack_whose_air_comes_back_clears_and_its_models_learn_again() -> None:
    """The models stand still while the rack is flagged; once the air is back the finding
    clears within minutes (the residuals' average lags by its time constant), and the
    rack stays quiet after."""
    fleet, d = PhasedFleet(TWO_RACKS, seed=2), RackCooling()
    onset, end = 2700.0, 2700.0 + 3600.0

    def air(t: float) -> dict[str, float]:
        up = min(15.0, max(0.0, (t - onset) / 60 * 2.0))
        return {"rack-00": up if t < end else max(0.0, 15.0 - (t - end) / 60 * 2.0)}

    found = run(fleet, d, 0.0, end + 3600.0, 15.0, air)
    back = end + 450.0  # the air is back to normal
    assert any(ts >= end for *_, ts in found)
    assert max(ts for *_, ts in found) - back <= 10 * 60


@pytest.mark.parametrize(("dt", "seed"), [(5.0, 5), (15.0, 6), (15.0, 7), (60.0, 8)])
def test_a_healthy_phased_load_raises_nothing(dt: float, seed: int) -> None:
    fleet, d = PhasedFleet(TWO_RACKS, seed=seed, inlet=True, idle_until_s=1800.0), RackCooling()
    assert run(fleet, d, 0.0, 3 * 3600.0, dt) == []
    for rule in ("rack_cooling", "node_cooling"):
        judged, given = d.coverage()[rule]
        assert 0.5 * given < judged <= given


def test_coverage_counts_the_gpu_samples_judged_and_given() -> None:
    d = RackCooling()
    assert d.coverage() == {"rack_cooling": (0, 0), "node_cooling": (0, 0)}
    frames = [node(0.0, [busy(60.0)] * 8, name=n, rack="r1") for n in ("a", "b")]
    d.update(frames)
    assert d.coverage() == {"rack_cooling": (0, 16), "node_cooling": (0, 16)}  # not warm yet
