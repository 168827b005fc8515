"""Fleet anomaly: a window is judged against the training history *and* its job peers now.

A whole job moving at the same minute (a phase the history never held) is the job's,
not a GPU's; one GPU unlike its peers and the history is flagged, in real units.
"""

from __future__ import annotations

import numpy as np

from fleetwatch.models.anomaly import _FLOORS, FEATURES, AnomalyModel, FleetAnomaly
from tests.models.helpers import A100, MODEL, busy, node

T0 = 1_763_800_020.0
HEAVY = 3
# A healthy heavy-phase window of the GPUs below: 60 °C, 400 W, 80% SM, 1980 MHz, steady.
CENTRE = dict(zip(FEATURES, (60.0, 0.0, 0.0, 400.0, 0.0, 0.8, 0.0, 1980.0, 0.0, 0.0, 0.0)))


def model() -> AnomalyModel:
    centre = np.array([CENTRE[f] for f in FEATURES])
    return AnomalyModel({HEAVY: centre}, {HEAVY: _FLOORS.copy()}, {HEAVY: 8.0}, {HEAVY: 500})


def run(per_gpu: list[dict[str, float]], jobs: list[str | None] | None = None,
        minutes: int = 31, models: list[str] | None = None) -> list:
    """One frame a minute of one node whose GPUs read ``per_gpu`` throughout."""
    anomaly = FleetAnomaly(model())
    found: list = []
    for m in range(minutes):
        found += anomaly.update([node(T0 + 60.0 * m, per_gpu, jobs=jobs, models=models)])
    return found


def test_a_whole_job_moving_together_is_its_phase_not_a_gpu_anomaly() -> None:
    # Every GPU of the job runs 580 MHz below the history's heavy phase: 11.6 spreads
    # from the history (past 8), nothing from each other.
    assert run([busy(60.0, gpu_sm_clock_mhz=1400.0)] * 4) == []


def test_a_job_on_a_node_mixing_parts_is_compared_within_each_part() -> None:
    # Two GPUs of each part run a phase the history never held (580 MHz below it), each
    # part at its own power: each moves with its own part. Against the other part's watts
    # (the median of three peers, two of the other part) every one would be 30 spreads out.
    gpus = [busy(60.0, gpu_sm_clock_mhz=1400.0)] * 2 + \
        [busy(60.0, 700.0, gpu_sm_clock_mhz=1400.0)] * 2
    assert run(gpus, models=[A100] * 2 + [MODEL] * 2) == []


def test_one_gpu_unlike_the_history_and_its_peers_says_so_in_watts() -> None:
    found = run([busy(60.0)] * 3 + [busy(60.0, 700.0)])
    assert [(f.gpu, f.ts) for f in found] == [(3, T0 + 60.0 * 20), (3, T0 + 60.0 * 30)]
    f = found[0]
    assert f.message == (
        "GPU 3 on n1: mean power 700 W for 20 min, against 400 W (spread 10 W) in the "
        "fleet's training history of the heavy phase (SM activity 60%-100%); its job "
        "peers on the node now: 400 W (score 30.0 spreads, alert above 8.0)")
    assert f.evidence == {
        "score": 30.0, "threshold": 8.0, "phase": 3, "power_mean_w": 700.0,
        "normal_power_mean_w": 400.0, "spread_power_mean_w": 10.0,
        "peers_power_mean_w": 400.0, "peer_score": 30.0,
        "z_power_mean": 30.0, "z_power_vs_node": 20.0, "z_temp_std": 0.0}
    assert all(isinstance(v, (int, float)) for v in f.evidence.values())


def test_a_gpu_with_no_job_peer_is_judged_against_the_history_and_says_so() -> None:
    found = run([busy(60.0, 700.0), busy(60.0), busy(60.0)], jobs=["a", "b", "c"])
    assert [f.gpu for f in found] == [0, 0]
    assert "no job peer on its node to compare with now" in found[0].message
    assert "peer_score" not in found[0].evidence


def run_sampled(per_gpu, minutes: int = 31, every_s: float = 10.0, drop=None) -> list:
    """Frames every ``every_s`` of one node; ``drop(k, gpu)`` names metrics a sample lacks."""
    anomaly = FleetAnomaly(model())
    found: list = []
    for k in range(int(minutes * 60 / every_s)):
        gpus = [{m: v for m, v in g.items() if not drop or m not in drop(k, i)}
                for i, g in enumerate(per_gpu)]
        found += anomaly.update([node(T0 + every_s * k, gpus)])
    return found


def test_an_error_counter_not_read_in_a_sample_is_no_error_growth() -> None:
    # GPU 3's NVLink and PCIe counters stand still; NVML did not give the PCIe one in
    # every 7th sample. The sum of the counters dipped there and rose back: 500 "errors".
    flat = busy(60.0, gpu_nvlink_crc_errors_total=1000.0, gpu_pcie_replay_total=500.0)
    assert run_sampled([busy(60.0)] * 3 + [flat],
                       drop=lambda k, i: {"gpu_pcie_replay_total"} if i == 3 and k % 7 == 0
                       else set()) == []


def test_error_counters_that_grow_are_still_seen_with_readings_missing() -> None:
    def climbing(k: int) -> dict[str, float]:
        return busy(60.0, gpu_nvlink_crc_errors_total=1000.0 + 50.0 * k,
                    gpu_pcie_replay_total=500.0)
    anomaly = FleetAnomaly(model())
    found: list = []
    for k in range(31 * 6):
        gpus = [busy(60.0)] * 3 + [{m: v for m, v in climbing(k).items()
                                    if not (k % 7 == 0 and m == "gpu_pcie_replay_total")}]
        found += anomaly.update([node(T0 + 10.0 * k, gpus)])
    assert {f.gpu for f in found} == {3}
    assert found[0].evidence["z_errors_log"] > 8.0


def test_training_windows_see_no_error_growth_where_a_counter_was_not_read() -> None:
    from fleetwatch.history import GPU_METRICS, Day
    from fleetwatch.models.anomaly import FEATURES as WINDOW_FEATURES
    from fleetwatch.train import anomaly_windows

    minutes = 20
    values = {m: np.full((1, minutes), np.nan) for m in GPU_METRICS}
    for m, v in busy(60.0, gpu_nvlink_crc_errors_total=1000.0,
                     gpu_pcie_replay_total=500.0).items():
        values[m][:] = v
    values["gpu_pcie_replay_total"][0, 7] = np.nan  # no reading in the whole minute
    day = Day([("c", "r1", "n1", 0)], np.arange(minutes) * 60_000, values)
    rows = anomaly_windows(day)
    assert len(rows) == 2
    assert rows[:, WINDOW_FEATURES.index("errors_log")].tolist() == [0.0, 0.0]
    values["gpu_nvlink_crc_errors_total"][0, 12:] += 100.0  # and a real rise is seen
    assert anomaly_windows(day)[:, WINDOW_FEATURES.index("errors_log")].tolist() == [
        0.0, float(np.log1p(100.0))]
