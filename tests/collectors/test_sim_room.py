"""The simulator's room: ``inlet_c`` and a warm spell move every rack's inlet air, and the
dies follow it degree for degree at the same power (the heat sink sits over the air)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.pipeline.store.sqlite import SqliteStore

START = 1_795_000_000.0


def run(params: SimParams, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Inlet air per node and die temperature per GPU, at each step."""
    sim = FleetSim(params, START)
    inlets, temps = [], []
    for _ in range(steps):
        sim.step()
        frames = sim.frames()
        inlets.append([f.host.metrics["host_inlet_temp_c"] for f in frames])
        temps.append([[g.metrics["gpu_temp_c"] for g in f.gpus] for f in frames])
    return np.array(inlets), np.array(temps)


def test_a_warmer_room_warms_every_die_degree_for_degree_at_the_same_power() -> None:
    base = SimParams(nodes=8, gpus=4, steady_load=True)
    cool_air, cool = run(base, 80)
    warm_air, warm = run(SimParams(nodes=8, gpus=4, steady_load=True, inlet_c=32.0), 80)
    assert np.allclose(warm_air - cool_air, 10.0, atol=0.05)
    rise = (warm - cool)[40:].mean()  # past the heat sink's lag
    assert 9.0 < rise < 11.0


def test_a_warm_spell_ramps_every_rack_alike_over_its_hours() -> None:
    params = SimParams(nodes=8, gpus=2, warm_spell_c=10.0, warm_spell_h=1.0)
    air, _ = run(params, 480)  # 2 h of 15 s steps
    still, _ = run(SimParams(nodes=8, gpus=2), 480)
    extra = air - still
    assert np.allclose(extra[119], 10.0 * 120 / 240, atol=0.05)  # half-way: +5 °C, all
    assert np.allclose(extra[-1], 10.0, atol=0.05)


def test_simulate_inlet_c_makes_a_warm_room_alert_for_the_cluster(tmp_path) -> None:
    """``fleetwatch simulate --inlet-c 30``: one room alert for the cluster in the store."""
    db = tmp_path / "hot.db"
    done = subprocess.run(
        [sys.executable, "-m", "fleetwatch", "simulate", "--nodes", "6", "--gpus", "2",
         "--no-faults", "--inlet-c", "30", "--duration", "30m", "--end", "1795000000",
         "--store", str(db)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    store = SqliteStore(str(db))
    try:
        room = [a for a in store.alerts() if a.rule == "room_inlet_hot"]
    finally:
        store.close()
    assert len(room) == 1 and room[0].device == "rack:*" and room[0].state == "firing"
    assert room[0].severity == "warning" and room[0].value > 27.0
