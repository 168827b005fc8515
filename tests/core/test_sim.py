from __future__ import annotations

import pytest

from fleetwatch.codec import decode, encode
from fleetwatch.collectors.sim import Fault, FleetSim, SimParams, parse_fault
from fleetwatch.collectors.sim.hardware import PARTS

START = 1_763_800_000.0


def run(sim: FleetSim, steps: int) -> list:
    out = []
    for _ in range(steps):
        sim.step()
        out.append(sim.frames())
    return out


def test_same_seed_same_fleet() -> None:
    a = run(FleetSim(SimParams(seed=7), START), 50)
    b = run(FleetSim(SimParams(seed=7), START), 50)
    c = run(FleetSim(SimParams(seed=8), START), 50)
    assert a == b
    assert a != c


@pytest.mark.parametrize("part", sorted(PARTS))
def test_values_stay_physical_for_a_day(part: str) -> None:
    sim = FleetSim(SimParams(nodes=4, gpus=8, seed=3, interval_s=60.0, part=part), START)
    pt = PARTS[part]
    jobs = set()
    for tick in run(sim, 24 * 60):
        for f in tick:
            decode(encode(f))  # every frame passes the decoder's range checks
            for g in f.gpus:
                m = g.metrics
                assert 15.0 < m["gpu_temp_c"] < pt.shutdown_c
                assert 30.0 <= m["gpu_power_w"] <= pt.power_limit_w
                assert g.model == pt.model and m["gpu_power_limit_w"] == pt.power_limit_w
                assert 0.0 <= m["gpu_util_pct"] <= 100.0
                jobs.add(g.job)
    assert None in jobs, "nodes should sometimes be idle"
    assert len(jobs) > 5, "jobs should start and end over a day"


def test_energy_counter_is_the_exact_integral_of_power() -> None:
    sim = FleetSim(SimParams(nodes=2, gpus=2, interval_s=10.0), START)
    ticks = run(sim, 300)
    for node in range(2):
        for gpu in range(2):
            energy = [t[node].gpus[gpu].metrics["gpu_energy_j"] for t in ticks]
            power = [t[node].gpus[gpu].metrics["gpu_power_w"] for t in ticks]
            assert all(b > a for a, b in zip(energy, energy[1:]))
            # power is linear between samples: the counter moves by the trapezoid
            for k in range(1, len(ticks)):
                step = (power[k - 1] + power[k]) / 2 * 10.0
                assert energy[k] - energy[k - 1] == pytest.approx(step, abs=0.2)


def test_ground_truth_energy_adds_up_by_gpu_job_user_and_team() -> None:
    sim = FleetSim(SimParams(nodes=6, gpus=4, seed=4, job_mean_s=1800, idle_mean_s=600), START)
    start_counter = None
    for k in range(600):
        sim.step()
        frames = sim.frames()
        if k == 0:
            start_counter = {(f.node, g.index): g.metrics["gpu_energy_j"] for f in frames
                             for g in f.gpus}
    end_counter = {(f.node, g.index): g.metrics["gpu_energy_j"] for f in frames for g in f.gpus}
    total = float(sim.energy_j.sum())
    for key in ("job", "user", "team"):
        by = sim.energy_by(key)
        assert sum(by.values()) == pytest.approx(total, rel=1e-12)
        assert by[None] > 0  # idle GPUs still draw power
    assert len(sim.energy_by("job")) > 5
    # the counters moved by the ground truth (less the first interval, before the first frame)
    moved = sum(end_counter[k] - start_counter[k] for k in end_counter)
    assert moved == pytest.approx(total, rel=0.005)


def test_jobs_span_several_nodes() -> None:
    sim = FleetSim(SimParams(nodes=8, gpus=1, seed=1, job_mean_s=3600, idle_mean_s=600), START)
    spans = set()
    for tick in run(sim, 2000):
        by_job: dict[str, int] = {}
        for f in tick:
            if f.gpus[0].job:
                by_job[f.gpus[0].job] = by_job.get(f.gpus[0].job, 0) + 1
        spans.update(by_job.values())
    assert max(spans) >= 2


def test_cooling_fault_heats_one_gpu_at_normal_power() -> None:
    params = SimParams(nodes=2, gpus=4, seed=2, job_mean_s=1e9, busy_at_start=1.0)
    faulty = FleetSim(params, START, [parse_fault("cooling:node-001/2@10m+30m")])
    healthy = FleetSim(params, START)
    ticks_f, ticks_h = run(faulty, 200), run(healthy, 200)
    # 35 minutes in (step 140): during the fault
    g_f, g_h = ticks_f[140][1].gpus[2].metrics, ticks_h[140][1].gpus[2].metrics
    # twice the thermal resistance: ~0.1 °C per watt more (how far depends on the job's phase)
    assert g_f["gpu_temp_c"] > g_h["gpu_temp_c"] + min(15, 0.07 * g_f["gpu_power_w"])
    assert g_f["gpu_power_w"] > 0.7 * g_h["gpu_power_w"]  # power stays near normal
    # other GPUs are untouched
    assert ticks_f[140][1].gpus[1] == ticks_h[140][1].gpus[1]
    truth = faulty.ground_truth[0]
    assert (truth.node, truth.gpu, truth.kind) == ("node-001", 2, "cooling")
    assert truth.onset_ts == START + 600 and truth.end_ts == START + 600 + 1800
    # and it cools down after the fault ends (step 199 is ~10 min after)
    assert ticks_f[199][1].gpus[2].metrics["gpu_temp_c"] < 80


@pytest.mark.parametrize("spec, message", [
    ("cooling", "expected KIND:NODE/GPU"),
    ("meteor:node-001/1", "unknown kind 'meteor'"),
    ("cooling:node-001/1x0.5", "severity must be above 1"),
])
def test_bad_fault_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault(spec)


def test_fault_on_missing_node_or_gpu() -> None:
    with pytest.raises(ValueError, match="no node node-009 in this fleet: its 2 nodes are "
                                         "node-000 .. node-001"):
        FleetSim(SimParams(nodes=2), START, [parse_fault("cooling:node-009/1")])
    with pytest.raises(ValueError, match="no GPU 8 on node-001: its 8 GPUs are 0 .. 7"):
        FleetSim(SimParams(nodes=2), START, [parse_fault("cooling:node-001/8")])


def test_old_style_fault_still_works() -> None:
    sim = FleetSim(SimParams(nodes=2, gpus=4), START, [Fault("cooling", "node-001", 3, 120.0,
                                                             600.0)])
    rec = sim.ground_truth[0]
    assert (rec.kind, rec.node, rec.gpu, rec.severity, rec.mode) == (
        "cooling", "node-001", 3, 2.0, "sudden")
    assert rec.rack == "rack-00" and rec.first_faulty_ts is None
    run(sim, 40)
    assert sim.ground_truth[0].first_faulty_ts is not None


def test_same_seed_same_faults_same_fleet() -> None:
    faults = [parse_fault(s) for s in ("nvlink:node-001/1@5m+30m~drift",
                                       "node_silent:node-002@3m+5m",
                                       "ecc_dbe:node-003/0@4m+20m~drift")]
    params = SimParams(nodes=4, gpus=4, seed=11)
    a, b = FleetSim(params, START, faults), FleetSim(params, START, faults)
    assert run(a, 200) == run(b, 200)
    assert a.ground_truth == b.ground_truth


def test_energy_fast_path_is_the_same_fleet_without_frames() -> None:
    params = SimParams(nodes=3, gpus=4, seed=6, job_mean_s=3600, idle_mean_s=300)
    fast, full = FleetSim(params, START), FleetSim(params, START)
    for _ in range(300):
        fast.step()
        full.step()
        frames = full.frames()
    assert (fast.energy_j == full.energy_j).all()
    assert fast.energy_by("user") == full.energy_by("user")
    assert fast.node_jobs == [f.gpus[0].job for f in frames]
    counters = [[g.metrics["gpu_energy_j"] for g in f.gpus] for f in frames]
    assert fast.energy_counter_j.round(3).tolist() == counters


def test_the_die_fluctuates_as_much_at_any_sampling_interval() -> None:
    """The die's noise is a process in time: sampling every 5 s instead of 15 must not make
    a GPU's temperature wander further from where its power and air put it."""
    import numpy as np

    spreads = {}
    for interval in (1.0, 5.0, 15.0):
        params = SimParams(nodes=8, gpus=8, seed=4, interval_s=interval, busy_at_start=0.0,
                           idle_mean_s=10 * 86400.0)  # idle all along: steady power
        sim = FleetSim(params, 1_700_000_000.0)
        dev = []
        for _ in range(int(4 * 3600 / interval)):
            sim.step()
            dev.append(sim.temp - (sim.inlet[:, None] + sim.r_th * sim.power
                                   + sim.hot_offset))
        spreads[interval] = float(np.std(np.array(dev[len(dev) // 4:])))
    assert spreads[15.0] == pytest.approx(spreads[5.0], rel=0.15), spreads
    assert spreads[15.0] == pytest.approx(spreads[1.0], rel=0.15), spreads


def test_every_part_can_be_chosen_wherever_a_fleet_is_simulated() -> None:
    import typing

    from fleetwatch.cli_args import PART_NAMES
    from fleetwatch.settings import SimConfig

    hint = typing.get_type_hints(SimConfig)["part"]
    assert PART_NAMES == tuple(PARTS) == typing.get_args(hint)
    with pytest.raises(ValueError, match="unknown simulated part 'v100'; the simulator has "
                                         "a100, h100"):
        FleetSim(SimParams(part="v100"), START)


def test_the_help_lists_the_simulators_fault_kinds_spec_and_fleet_limits() -> None:
    from fleetwatch import simulate
    from fleetwatch.cli_args import FAULT_HELP, FAULT_KINDS, MAX_GPUS, MAX_NODES
    from fleetwatch.collectors.sim.faults import KINDS, SPEC_HELP

    assert FAULT_KINDS == KINDS and SPEC_HELP in FAULT_HELP
    assert (MAX_NODES, MAX_GPUS) == (simulate.MAX_NODES, simulate.MAX_GPUS)


def test_simulate_holds_a_bounded_number_of_frames_however_big_the_fleet(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """An hour of 1,000 nodes at 5 s was held (15 GB) before anything was written."""
    from fleetwatch import simulate as sim_module
    from fleetwatch.pipeline.processor import Processor
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    sizes: list[int] = []
    real = Processor.process

    def counted(self: Processor, frames):  # type: ignore[no-untyped-def]
        sizes.append(len(frames))
        return real(self, frames)

    monkeypatch.setattr(Processor, "process", counted)
    monkeypatch.setattr(sim_module, "MAX_BATCH_FRAMES", 50)
    store = SqliteStore(tmp_path / "s.db")
    result = sim_module.simulate(store, SimParams(nodes=8, gpus=2, interval_s=15.0),
                                 1_790_000_000.0, 3600.0)
    store.close()
    assert max(sizes) <= 50 and sum(sizes) == result.frames == 8 * 240


def test_simulate_pages_a_node_silent_for_twenty_minutes(tmp_path) -> None:
    """An hour of frames went through the processor in one batch, and silence was judged at
    its end only: a node silent for 20 minutes in the middle was never paged."""
    from fleetwatch import simulate as sim_module
    from fleetwatch.collectors.sim import Fault
    from fleetwatch.config import DetectorsConfig
    from fleetwatch.models.registry import build
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "s.db")
    silent = Fault("node_silent", "node-001", None, 1800.0, 1200.0)
    sim_module.simulate(store, SimParams(nodes=4, gpus=2, interval_s=15.0), 1_790_000_000.0,
                        2 * 3600.0, [silent], detectors=build(DetectorsConfig()))
    paged = [a for a in store.alerts(states=("firing", "resolved"))
             if a.rule == "node_silent" and a.node == "node-001"]
    store.close()
    assert paged and paged[0].fired_ts is not None
    assert 1_790_000_000.0 + 1800.0 < paged[0].fired_ts < 1_790_000_000.0 + 1800.0 + 300.0
