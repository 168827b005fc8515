from __future__ import annotations

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.peers import ThermalPeers
from tests.models.helpers import A100, MIXED, MODEL, busy, node, rules

STEP = 5.0


def run(detector: ThermalPeers, temps_at, seconds: float, start: float = 0.0,
        power_at=None, step: float = STEP) -> list:
    """Feed one 8-GPU node every ``step`` seconds; temps_at(t) -> 8 temperatures."""
    found = []
    t = start
    while t < start + seconds:
        powers = power_at(t) if power_at else [400.0] * 8
        found += detector.update([node(t, [busy(x, p) for x, p in zip(temps_at(t), powers)])])
        t += step
    return found


def base(t: float) -> list[float]:
    return [66.0, 65.0, 67.0, 66.0, 65.0, 66.0, 67.0, 66.0]


def test_a_gpu_overheating_at_78_c_is_caught_well_under_the_fixed_limits() -> None:
    d = ThermalPeers()
    assert run(d, base, 900) == []
    found = run(d, lambda t: [78.0] + base(t)[1:], 60, start=900)
    assert found and {r for r, _ in rules(found)} <= {"gpu_hot_vs_peers",
                                                      "gpu_hot_vs_peers_critical"}
    assert {f.gpu for f in found} == {0}
    f = found[0]
    assert f.evidence["excess_c"] >= 10 and f.evidence["peers"] == 7
    assert f.ts == 900                                         # on its first hot sample


def test_a_sudden_cooling_loss_is_critical_with_no_for_duration() -> None:
    d = ThermalPeers()
    run(d, base, 900)
    ramp = lambda t: [66.0 + 0.8 * (t - 900)] + base(t)[1:]    # noqa: E731
    crit = [f for f in run(d, ramp, 40, start=900) if f.rule == "gpu_hot_vs_peers_critical"]
    assert crit and crit[0].for_s == 0 and crit[0].ts <= 900 + 15


def test_a_healthy_gpu_that_always_runs_warmer_is_learned_not_alarmed() -> None:
    d = ThermalPeers()
    warm = lambda t: [70.5] + base(t)[1:]                      # noqa: E731
    assert run(d, warm, 4 * 3600) == []


def test_job_load_swings_move_every_gpu_together_and_do_not_alarm() -> None:
    d = ThermalPeers()
    taus = [40.0, 45.0, 50.0, 42.0, 48.0, 44.0, 46.0, 41.0]   # each GPU its own thermal lag
    temps = [35.0] * 8

    def power(t: float) -> list[float]:
        return [400.0 if int(t // 300) % 2 else 110.0] * 8   # compute- then comm-bound phases

    def temp(t: float) -> list[float]:
        p = power(t)[0]
        for i in range(8):
            target = 25.0 + 0.1 * p
            temps[i] += (target - temps[i]) * (1 - 2.718 ** (-STEP / taus[i]))
        return list(temps)

    assert run(d, temp, 3 * 3600, power_at=power) == []


def test_a_sensor_reading_far_below_peers_at_the_same_power_is_a_failing_sensor() -> None:
    d = ThermalPeers()
    run(d, base, 900)
    found = run(d, lambda t: [40.0] + base(t)[1:], 20, start=900)
    assert rules(found)[0] == ("gpu_temp_sensor_low", 0)
    assert found[0].for_s == DetectorsConfig().sensor_for_s


def test_a_gpu_that_learned_it_runs_warm_and_then_runs_cool_is_not_a_failing_sensor() -> None:
    """Its offset was learned during its first busy minutes while a cooling fault was
    already there (seen on the simulated H100 fleet); with the fault gone (a new fan) it
    runs a little cooler than its peers, which is no failing sensor. One reading far below
    them still is."""
    d = ThermalPeers()
    assert run(d, lambda t: [74.0] + base(t)[1:], 1800) == []  # learned: +8 is its usual
    cool = lambda t: [61.0] + base(t)[1:]                      # noqa: E731
    assert run(d, cool, 1800, start=1800) == []
    found = run(d, lambda t: [50.0] + base(t)[1:], 30, start=3600)
    assert rules(found)[0] == ("gpu_temp_sensor_low", 0)


def test_an_idle_gpu_inside_a_busy_job_is_not_compared_with_the_busy_ones() -> None:
    d = ThermalPeers()
    power = lambda t: [60.0] + [400.0] * 7                     # noqa: E731
    temps = lambda t: [35.0] + base(t)[1:]                     # noqa: E731
    assert run(d, temps, 1800, power_at=power) == []


def test_before_warm_up_a_gpu_is_granted_the_largest_offset_and_needs_enough_peers() -> None:
    # Until its own offset is learned, a GPU may run as warm as the warmest healthy one
    # (max_offset_c, 8 °C) plus the margin (5 °C) without a page ...
    d = ThermalPeers()
    assert run(d, lambda t: [77.0] + base(t)[1:], 300) == []   # 11 °C above its peers
    lone = ThermalPeers()
    found = []
    for k in range(300):
        found += lone.update([node(5.0 * k, [busy(66.0), busy(66.0), busy(85.0)])])
    assert found == []                                         # 2 peers: fewer than min_peers


def test_a_heat_path_already_failing_when_the_job_starts_pages_in_the_warm_up() -> None:
    """... but one further out than that is no offset to learn: a node back from repair with
    a bad fan, whose GPU runs far hotter than its peers from the job's first minute, pages
    then, and the fault is not learned as its way (seen in `fleetwatch simulate`: a cooling
    fault 4 minutes into the job went unreported for its whole 2 hours)."""
    d = ThermalPeers()
    hot = lambda t: [66.0 + min(20.0, t / 6.0)] + base(t)[1:]  # noqa: E731  # +20 °C in 2 min
    found = run(d, hot, 1800)
    assert {f.gpu for f in found} == {0} and found[0].ts <= 120, rules(found)[:3]
    assert found[0].evidence["own_offset_c"] == DetectorsConfig().max_offset_c
    # Still out after the warm-up: little of it was learned (only the first minute of the
    # climb, before it was out that far), so the page stands at most of its 20 °C.
    late = [f for f in found if f.ts >= 1700]
    assert late and late[-1].evidence["own_offset_c"] < 4.0
    assert late[-1].evidence["excess_c"] > 15.0


def test_drop_forgets_the_learned_state() -> None:
    d = ThermalPeers()
    run(d, base, 900)
    d.drop(["n1"])
    assert run(d, lambda t: [77.0] + base(t)[1:], 300, start=900) == []  # warming up again


def test_temperature_only_series_are_compared_among_themselves() -> None:
    d = ThermalPeers()
    found = []
    for k in range(240):
        temps = [66.0] * 7 + [66.0 if k < 200 else 80.0]
        found += d.update([node(5.0 * k, [{"gpu_temp_c": x} for x in temps])])
    assert {(f.rule, f.gpu) for f in found} <= {("gpu_hot_vs_peers", 7),
                                                ("gpu_hot_vs_peers_critical", 7)}
    assert found and found[0].ts == 1000.0


def test_a_power_blip_that_the_die_answers_at_once_does_not_page() -> None:
    """A real die sits a step above its heat sink that follows its power within a second
    (an H100: 0.024 °C/W; the simulated A100: 0.047). One GPU drawing 80 W more than its
    peers for one sample reads up to 4 °C warmer for that sample, on a part whose step is
    larger than die_c_per_w: no page."""
    for r_die in (0.024, 0.047):
        d = ThermalPeers()
        assert run(d, base, 900) == []
        power = lambda t: [400.0 + 80.0 * (t == 905)] + [400.0] * 7              # noqa: E731
        found = run(d, lambda t, r=r_die: [66.0 + r * 80.0 * (t == 905)] + base(t)[1:], 30,
                    start=900, power_at=power)
        assert found == [], (r_die, rules(found))


def test_a_heat_path_failing_at_steady_power_pages_at_its_first_climbing_samples() -> None:
    """The heat sink climbs at steady power (a real H100's sink: 23 s time constant)."""
    d = ThermalPeers()
    run(d, base, 900)
    climb = lambda t: [66.0 + 25.0 * (1 - 2.718 ** (-(t - 900) / 60.0))] + base(t)[1:]  # noqa: E731
    crit = [f for f in run(d, climb, 60, start=900) if f.rule == "gpu_hot_vs_peers_critical"]
    assert crit and crit[0].ts <= 900 + 15



def test_a_node_mixing_parts_compares_each_gpu_with_its_own_part_only() -> None:
    """At the same 400 W in 22 °C air an A100 SXM4 (0.10 °C/W) runs at 62 °C, an H100
    (0.0535 °C/W) at 43 °C: two A100s among six H100s are neither hot (nor critical, once
    warm) against the other part. A failing A100 heat path is still caught among A100s."""
    d = ThermalPeers()
    healthy = [62.0, 61.0, 43.0, 44.0, 43.0, 42.0, 43.0, 44.0]
    models = [A100] * 2 + [MODEL] * 6
    found = []
    for t in range(0, 3600, 5):
        found += d.update([node(t, [busy(x) for x in healthy], models=models)])
    assert found == []
    d = ThermalPeers()
    healthy = [62.0, 61.0, 63.0, 62.0, 43.0, 44.0, 43.0, 42.0]
    for t in range(0, 3600, 5):
        assert d.update([node(t, [busy(x) for x in healthy], models=MIXED)]) == []
    failing = [75.0] + healthy[1:]
    found = [f for t in range(3600, 3660, 5)
             for f in d.update([node(t, [busy(x) for x in failing], models=MIXED)])]
    assert found and {f.gpu for f in found} == {0}
    assert found[0].rule == "gpu_hot_vs_peers" and found[0].evidence["peers"] == 3


def test_the_message_says_the_gpus_distance_from_its_peers_and_the_offset_allowed() -> None:
    """A GPU not yet learned, 16 °C above its peers: it is allowed max_offset_c (8 °C) as
    its own offset, and the message says both, not only the 8 °C beyond."""
    found = run(ThermalPeers(), lambda t: [82.0] + base(t)[1:], 60)
    f = next(f for f in found if f.rule == "gpu_hot_vs_peers")
    allowed = DetectorsConfig().max_offset_c
    assert f.message.startswith("GPU 0 on n1 at 82 °C, 16 °C above its 7 peers at the same "
                                f"power ({allowed:.0f} °C allowed as its own offset, "
                                f"{16 - allowed:.0f} °C beyond)")
    assert f.evidence["temp_c"] - f.evidence["peer_median_c"] == 16.0
    assert f.evidence["excess_c"] == 16.0 - allowed
