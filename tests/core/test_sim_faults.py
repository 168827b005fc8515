"""Every fault kind, in each of its modes: its signature shows on its subject from the
recorded first faulty sample, and nothing changes before it."""

from __future__ import annotations

import pytest

from fleetwatch.codec import decode, encode
from fleetwatch.collectors.sim import SPECS, Fault, FleetSim, SimParams, parse_fault
from fleetwatch.collectors.sim.hardware import A100
from fleetwatch.frame import Frame

START = 1_763_800_000.0
PARAMS = SimParams(nodes=4, gpus=4, nodes_per_rack=2, seed=5, job_mean_s=1e9, busy_at_start=1.0)
STEPS = 480  # two hours at 15 s


def run(faults: list[Fault], steps: int = STEPS,
        params: SimParams = PARAMS) -> tuple[FleetSim, list[list[Frame]]]:
    sim = FleetSim(params, START, faults)
    ticks = []
    for _ in range(steps):
        sim.step()
        ticks.append(sim.frames())
    return sim, ticks


@pytest.fixture(scope="module")
def healthy() -> list[list[Frame]]:
    return run([])[1]


def node(tick: list[Frame], name: str) -> Frame | None:
    return next((f for f in tick if f.node == name), None)


def metric(tick: list[Frame], name: str, gpu: int, key: str) -> float:
    frame = node(tick, name)
    assert frame is not None
    return frame.gpus[gpu].metrics[key]


def at(ts: float) -> int:
    return round((ts - START) / PARAMS.interval_s) - 1


CASES = [(k, m) for k, spec in SPECS.items() for m in spec.modes]


@pytest.mark.parametrize("kind, mode", CASES)
def test_nothing_changes_before_the_first_faulty_sample(kind: str, mode: str,
                                                        healthy: list[list[Frame]]) -> None:
    scope = SPECS[kind].scope
    fault = Fault(kind, None if scope == "rack" else "node-001",
                  1 if scope == "gpu" else None, 600.0, 3600.0, None, mode,  # type: ignore[arg-type]
                  "rack-00" if scope == "rack" else None)
    sim, ticks = run([fault])
    rec = sim.ground_truth[0]
    assert (rec.kind, rec.mode, rec.onset_ts, rec.end_ts) == (kind, mode, START + 600,
                                                                START + 4200)
    assert rec.rack == "rack-00" and rec.node == fault.node and rec.gpu == fault.gpu
    assert rec.first_faulty_ts is not None, "the fault never showed"
    assert rec.onset_ts <= rec.first_faulty_ts < rec.end_ts
    first = at(rec.first_faulty_ts)
    assert ticks[:first] == healthy[:first]
    assert ticks[first] != healthy[first]
    # ... and the first change is on the subject: its GPU, its node, its rack's nodes
    subject = {"rack": {"node-000", "node-001"}, "node": {"node-001"}, "gpu": {"node-001"}}[scope]
    if kind == "straggler":
        # In lockstep its job waits for it: the job's other GPUs, wherever they are, show
        # less SM activity at the same moment; nothing outside the job changes.
        job = node(ticks[first], "node-001").gpus[1].job
        assert job is not None
        for name in ("node-000", "node-001", "node-002", "node-003"):
            f, h = node(ticks[first], name), node(healthy[first], name)
            changed = [a != b for a, b in zip(f.gpus, h.gpus)]
            assert all(g.job == job for g, c in zip(f.gpus, changed) if c), name
            if name == "node-001":
                assert changed[1]
                assert f.gpus[0].metrics["gpu_sm_active_ratio"] < \
                    h.gpus[0].metrics["gpu_sm_active_ratio"]
    for name in ("node-000", "node-001", "node-002", "node-003"):
        same = node(ticks[first], name) == node(healthy[first], name)
        if kind == "straggler":
            break
        if name not in subject:
            assert same, name
        elif scope == "gpu":
            f, h = node(ticks[first], name), node(healthy[first], name)
            assert [a == b for a, b in zip(f.gpus, h.gpus)] == [True, False, True, True]
    if scope != "gpu":
        assert all(node(ticks[first], n) != node(healthy[first], n) for n in subject)
    for tick in ticks:  # every frame stays valid on the wire
        for f in tick:
            decode(encode(f))
    if mode == "sudden":
        assert rec.first_faulty_ts - rec.onset_ts <= 120.0


def test_cooling_sudden_heats_one_gpu_at_its_power(healthy: list[list[Frame]]) -> None:
    sim, ticks = run([parse_fault("cooling:node-001/2@10m+30m")])
    for k in range(at(START + 600 + 600), at(START + 2400)):
        hot = metric(ticks[k], "node-001", 2, "gpu_temp_c")
        ref = metric(healthy[k], "node-001", 2, "gpu_temp_c")
        power = metric(ticks[k], "node-001", 2, "gpu_power_w")
        # twice the thermal resistance: ~0.1 °C more per watt, less what throttling sheds
        assert hot - ref >= min(0.07 * power, 89 - ref - 3), k
    assert ticks[at(START + 2400)][0] == healthy[at(START + 2400)][0]  # other nodes untouched
    # ten minutes after it ends, it is back with its twin
    k = at(START + 600 + 1800 + 600)
    assert abs(metric(ticks[k], "node-001", 2, "gpu_temp_c")
               - metric(healthy[k], "node-001", 2, "gpu_temp_c")) <= 1


def test_cooling_slow_stays_under_the_limits_and_peaks_high() -> None:
    # Heavy steady load: the slow fault must still stay sub-limit.
    params = SimParams(nodes=2, gpus=4, seed=9, job_mean_s=1e9, steady_load=True)
    sim, ticks = run([parse_fault("cooling_slow:node-000/0@10m+4hx1.6")], 4 * 240 + 40, params)
    temps = [t[0].gpus[0].metrics["gpu_temp_c"] for t in ticks]
    peers = [max(g.metrics["gpu_temp_c"] for g in t[0].gpus[1:]) for t in ticks]
    # The fault holds the heat sink where the die averages 79 °C; the die follows its
    # power within a second, so a sample at a power peak reads a degree or two above.
    plateau = temps[3 * 240:]
    assert sum(plateau) / len(plateau) <= 79.5
    assert max(temps) <= 82                    # A100: high at 85 °C, slowdown at 89 °C
    assert max(temps) >= 72
    # hotter than its load explains: well above the node's other GPUs late in the ramp
    late = range(3 * 240, 4 * 240)
    assert sum(temps[k] - peers[k] for k in late) / len(late) > 4
    assert all(not int(t[0].gpus[0].metrics["gpu_throttle_reasons"]) & 0x60 for t in ticks)


def test_rack_cooling_warms_every_gpu_of_the_rack(healthy: list[list[Frame]]) -> None:
    sim, ticks = run([parse_fault("rack_cooling:rack-01@10m+1h~sudden")])
    k = at(START + 600 + 1200)
    for name in ("node-002", "node-003"):
        f, h = node(ticks[k], name), node(healthy[k], name)
        assert f.host.metrics["host_inlet_temp_c"] - h.host.metrics["host_inlet_temp_c"] > 14
        assert all(a.metrics["gpu_temp_c"] - b.metrics["gpu_temp_c"] >= 10
                   for a, b in zip(f.gpus, h.gpus))
    assert node(ticks[k], "node-000") == node(healthy[k], "node-000")


def test_xid79_then_lost_without_metrics() -> None:
    sim, ticks = run([parse_fault("xid79:node-001/3@10m+1h")])
    rec = sim.ground_truth[0]
    k = at(rec.first_faulty_ts)
    g = node(ticks[k], "node-001").gpus[3]
    assert g.xids == (79,) and g.state == "ok"
    after = node(ticks[k + 1], "node-001").gpus[3]
    assert after.state == "lost" and after.metrics == {}
    assert node(ticks[k + 1], "node-001").gpus[0].job is None  # the job died with it
    back = node(ticks[at(rec.end_ts) + 1], "node-001").gpus[3]
    assert back.state == "ok" and back.metrics["gpu_energy_j"] < 1e5  # rebooted: counter reset


def test_xid79_drift_shows_pcie_replays_first() -> None:
    sim, ticks = run([parse_fault("xid79:node-001/3@10m+1h~drift")])
    rec = sim.ground_truth[0]
    k = at(rec.first_faulty_ts)
    assert metric(ticks[k], "node-001", 3, "gpu_pcie_replay_total") > 0
    xid_at = next(i for i, t in enumerate(ticks) if node(t, "node-001").gpus[3].xids)
    assert xid_at > k + 20 and node(ticks[xid_at], "node-001").gpus[3].xids == (79,)


@pytest.mark.parametrize("spec, xids, pending, failure", [
    ("ecc_dbe:node-001/1@10m+1h", (48, 94, 63), 1, 0),
    ("ecc_dbe:node-001/1@10m+1hx2", (48, 95, 64), 0, 1),
])
def test_ecc_dbe_as_the_driver_reports_it(spec: str, xids: tuple, pending: int,
                                          failure: int) -> None:
    sim, ticks = run([parse_fault(spec)])
    k = at(sim.ground_truth[0].first_faulty_ts)
    g = node(ticks[k], "node-001").gpus[1]
    assert g.xids == xids
    m = g.metrics
    assert m["gpu_ecc_dbe_volatile_total"] == 1 and m["gpu_remapped_rows_uncorrectable"] == 1
    assert (m["gpu_row_remap_pending"], m["gpu_row_remap_failure"]) == (pending, failure)


def test_ecc_drift_single_bit_rate_climbs_then_double_bit() -> None:
    sim, ticks = run([parse_fault("ecc_dbe:node-001/1@10m+1h~drift")])
    sbe = [metric(t, "node-001", 1, "gpu_ecc_sbe_volatile_total") for t in ticks]
    k0 = at(sim.ground_truth[0].first_faulty_ts)
    assert sbe[k0] > 0 and sbe[k0 - 1] == 0
    xids = [node(t, "node-001").gpus[1].xids for t in ticks]
    assert (92,) in xids
    dbe_at = xids.index((48, 94, 63))
    assert sbe[dbe_at] - sbe[dbe_at - 40] > sbe[k0 + 40] - sbe[k0]  # the rate climbed


def test_nvlink_errors_climb_then_link_down() -> None:
    sim, ticks = run([parse_fault("nvlink:node-002/0@10m+1h")])
    crc = [metric(t, "node-002", 0, "gpu_nvlink_crc_errors_total") for t in ticks]
    down = [metric(t, "node-002", 0, "gpu_nvlink_links_down") for t in ticks]
    xid_at = next(i for i, t in enumerate(ticks) if node(t, "node-002").gpus[0].xids == (74,))
    assert down[xid_at] == 1 and down[xid_at - 1] == 0
    assert crc[xid_at] > 100 and all(b >= a for a, b in zip(crc, crc[1:]))
    assert metric(ticks[xid_at], "node-002", 0, "gpu_nvlink_recovery_errors_total") > 0
    assert down[-1] == 0  # retrained after the fault


def test_stuck_gpu_idles_while_its_peers_work(healthy: list[list[Frame]]) -> None:
    """A hung kernel: resident on the SMs its blocks hold (the same share throughout), no
    tensor or DRAM work, the power of a GPU holding its clock with nothing to do."""
    sim, ticks = run([parse_fault("stuck:node-000/2@10m+1h")])
    shares = set()
    for k in range(at(START + 700), at(START + 4000)):
        f = node(ticks[k], "node-000")
        g = f.gpus[2].metrics
        shares.add(g["gpu_sm_active_ratio"])
        assert g["gpu_tensor_active_ratio"] == 0 and g["gpu_dram_active_ratio"] < 1e-4
        assert g["gpu_util_pct"] == 100 and f.gpus[2].job is not None
        assert g["gpu_power_w"] < 100
        assert f.gpus[0].metrics == node(healthy[k], "node-000").gpus[0].metrics
    (share,) = shares
    assert round(share * sim.part.sms) in (1, 2, 4, 8, 16, 32)
    assert share == pytest.approx(round(share * sim.part.sms) / sim.part.sms)


def test_straggler_runs_at_half_clock(healthy: list[list[Frame]]) -> None:
    sim, ticks = run([parse_fault("straggler:node-003/1@10m+1h")])
    for k in range(at(START + 700), at(START + 4000)):
        f = node(ticks[k], "node-003")
        if f.gpus[0].metrics["gpu_util_pct"] > 0:
            assert f.gpus[1].metrics["gpu_sm_clock_mhz"] <= 720
            assert f.gpus[1].metrics["gpu_sm_active_ratio"] <= (
                0.7 * f.gpus[0].metrics["gpu_sm_active_ratio"] + 0.03)


def test_power_brake_and_power_cap() -> None:
    sim, ticks = run([parse_fault("power_brake:node-001/0@10m+1h")])
    k = at(START + 1200)
    m = metric(ticks[k], "node-001", 0, "gpu_throttle_reasons")
    assert int(m) & 0x88 == 0x88
    assert metric(ticks[k], "node-001", 0, "gpu_sm_clock_mhz") <= 1410 / 3
    sim, ticks = run([parse_fault("power_brake:node-001/0@10m+1h~drift")])
    limits = [metric(t, "node-001", 0, "gpu_power_limit_w") for t in ticks]
    powers = [metric(t, "node-001", 0, "gpu_power_w") for t in ticks]
    assert min(limits) == round(A100.power_limit_w / 3)
    assert all(p <= lim for p, lim in zip(powers, limits))


def test_sensor_reads_impossible_or_falls_while_the_gpu_is_fine(
        healthy: list[list[Frame]]) -> None:
    sim, ticks = run([parse_fault("sensor:node-001/2@10m+1h")])
    k = at(START + 1200)
    assert metric(ticks[k], "node-001", 2, "gpu_temp_c") in (0.0, 127.0)
    assert (metric(ticks[k], "node-001", 2, "gpu_power_w")
            == metric(healthy[k], "node-001", 2, "gpu_power_w"))
    sim, ticks = run([parse_fault("sensor:node-001/2@10m+2h~drift")])
    k = at(START + 600 + 3700)
    fell = (metric(healthy[k], "node-001", 2, "gpu_temp_c")
            - metric(ticks[k], "node-001", 2, "gpu_temp_c"))
    assert 28 <= fell <= 32


def test_node_silent_sends_nothing_then_returns() -> None:
    sim, ticks = run([parse_fault("node_silent:node-002@10m+10m")])
    names = [[f.node for f in t] for t in ticks]
    assert "node-002" not in names[at(START + 700)]
    assert "node-002" in names[at(START + 585)] and "node-002" in names[at(START + 1300)]
    assert all(len(n) >= 3 for n in names)


def test_pcie_replay_rate_climbs() -> None:
    sim, ticks = run([parse_fault("pcie_replay:node-000/3@10m+1h~drift")])
    c = [metric(t, "node-000", 3, "gpu_pcie_replay_total") for t in ticks]
    early = c[at(START + 600 + 600)] - c[at(START + 600)]
    late = c[at(START + 600 + 3000)] - c[at(START + 600 + 2400)]
    assert late > 3 * max(early, 1) and late >= 0.5 * 50 * 10  # ~50/min at full strength


@pytest.mark.parametrize("spec, message", [
    ("rack_cooling:node-001/1", "whole rack"),
    ("cooling:node-001", "happens to one GPU"),
    ("stuck:node-001/1~drift", "mode 'drift' not available"),
    ("cooling:node-001/1~slowly", "mode must be ~drift or ~sudden"),
    ("node_silent:node-001/0", "whole node"),
    ("cooling:node-001/1@5q", "START '5q' is not a duration"),
    ("pcie_replay:node-001/1x0", "severity must be above 0"),
])
def test_bad_specs_say_what_to_do(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault(spec)


def test_rack_fault_on_missing_rack() -> None:
    with pytest.raises(ValueError, match="no rack rack-07 in this fleet: its 2 racks are "
                                         "rack-00 .. rack-01"):
        FleetSim(PARAMS, START, [parse_fault("rack_cooling:rack-07")])


@pytest.mark.parametrize(("spec", "missing", "message"), [
    ("cooling:node-009/1", "node", "cooling:node-009/1: no node node-009 in this fleet: its 4 "
                                   "nodes are node-000 .. node-003"),
    ("cooling:node-001/7", "gpu", "cooling:node-001/7: no GPU 7 on node-001: its 4 GPUs are "
                                  "0 .. 3"),
    ("node_silent:node-004", "node", "node_silent:node-004: no node node-004"),
    ("rack_cooling:rack-02", "rack", "rack_cooling:rack-02: no rack rack-02 in this fleet: its "
                                     "2 racks are rack-00 .. rack-01"),
])
def test_a_fault_on_what_the_fleet_lacks_is_named_before_a_simulator_exists(
        spec: str, missing: str, message: str) -> None:
    from fleetwatch.collectors.sim.faults import NoSuchSubject, check_subjects

    with pytest.raises(NoSuchSubject) as exc:
        check_subjects([parse_fault(spec)], PARAMS.nodes, PARAMS.gpus, PARAMS.nodes_per_rack)
    assert str(exc.value).startswith(message) and exc.value.missing == missing
    with pytest.raises(ValueError, match=f"fault {message}"):  # the simulator says the same
        FleetSim(PARAMS, START, [parse_fault(spec)])


def test_a_fleet_of_one_says_its_only_node_gpu_and_rack() -> None:
    from fleetwatch.collectors.sim.faults import check_subjects

    for spec, only in (("cooling:node-001/0", "its only node is node-000"),
                       ("cooling:node-000/1", "its only GPU is 0"),
                       ("rack_cooling:rack-01", "its only rack is rack-00")):
        with pytest.raises(ValueError, match=only):
            check_subjects([parse_fault(spec)], 1, 1, 2)
    check_subjects([parse_fault("cooling:node-000/0"), parse_fault("rack_cooling:rack-00"),
                    parse_fault("node_silent:node-000")], 1, 1, 2)  # what it has: no error


@pytest.mark.parametrize(("nodes", "per_rack"), [(1, 1), (4, 2), (5, 2), (130, 4), (1000, 7)])
def test_the_names_checked_are_the_names_the_simulator_gives(nodes: int, per_rack: int) -> None:
    from fleetwatch.collectors.sim.faults import node_name, rack_name

    sim = FleetSim(SimParams(nodes=nodes, gpus=1, nodes_per_rack=per_rack), START)
    assert sim.node_names == [node_name(i) for i in range(nodes)]
    assert sim.rack_names == [rack_name(r) for r in range((nodes - 1) // per_rack + 1)]


def test_hw_slowdown_holds_a_dead_cooler_under_shutdown() -> None:
    params = SimParams(nodes=2, gpus=4, seed=3, job_mean_s=1e9, steady_load=True)
    sim, ticks = run([parse_fault("cooling:node-001/0@10m+1hx4")], 300, params)
    during = [t[1].gpus[0].metrics for t in ticks[60:280]]
    assert max(m["gpu_temp_c"] for m in during) < 92           # never reaches shutdown
    assert max(m["gpu_temp_c"] for m in during) >= 89          # but sits at slowdown
    throttled = [m for m in during if int(m["gpu_throttle_reasons"]) & 0x60]
    assert len(throttled) > 0.8 * len(during)
    assert min(m["gpu_sm_clock_mhz"] for m in throttled) < 1000  # clocks cut to hold it
