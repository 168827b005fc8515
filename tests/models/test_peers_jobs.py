"""Thermal peers across jobs: GPUs of one node share its air or coolant whatever job they run.

On an inference node each GPU is its own job (Kubernetes: one pod, ``pod:<uid>``), so peers
of the same job only left every such GPU unjudged: a slow cooling failure went unseen for
hours, while the same fault on a training node was caught in minutes.
"""

from __future__ import annotations

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.batch import columns
from fleetwatch.models.peer_stats import heat_peers
from fleetwatch.models.peers import ThermalPeers
from tests.models.helpers import A100, MODEL, busy, node

PODS = [f"pod:{i}" for i in range(8)]


def mask(powers: list[float], jobs: list[str | None], models: list[str] | None = None,
         metered: bool = True) -> np.ndarray:
    """The (G, G) heat-peer mask of one 8-GPU frame at these (steady) powers."""
    b = columns([node(0.0, [busy(60.0, p) for p in powers], jobs=jobs, models=models)])
    rows = np.arange(1)
    plag = np.asarray([powers], float)
    c = DetectorsConfig()
    ok = np.ones((1, len(powers)), bool)
    peers, other = heat_peers(b, rows, ok, ok & metered, plag, c.min_peers, c.peer_power_tol_w)
    if other is not None:                 # those of other jobs: a part of the peers
        assert not (other & ~peers).any()
        jobs_ = b.job[rows]
        assert not (other & (jobs_[:, :, None] == jobs_[:, None, :])).any()
    return peers[0]


def test_an_inference_node_of_one_gpu_jobs_at_equal_power_are_each_others_peers() -> None:
    m = mask([600.0] * 8, PODS)
    assert (m == ~np.eye(8, dtype=bool)).all()


def test_a_gpu_idling_at_60_w_beside_busy_ones_of_other_jobs_is_no_peer_of_theirs() -> None:
    m = mask([60.0] + [600.0] * 7, PODS)
    assert not m[0].any() and not m[:, 0].any()          # neither way
    assert m[1:, 1:].sum() == 7 * 6                       # the busy ones: each other's


def test_a_job_with_enough_gpus_on_the_node_keeps_to_itself() -> None:
    # Two 4-GPU jobs: three peers each in their own job, the minimum: no other job's.
    jobs = ["a"] * 4 + ["b"] * 4
    m = mask([600.0] * 8, jobs)
    assert (m[:4, 4:] == 0).all() and (m[4:, :4] == 0).all()
    # Within its job, a peer at any power, as before (the rule picks by power after).
    m = mask([60.0] + [600.0] * 7, ["a"] * 8)
    assert m[0, 1:].all() and m[1:, 0].all()


def test_a_small_job_borrows_other_jobs_at_its_power_only() -> None:
    # A 2-GPU job (one peer of its own) beside six GPUs of other jobs, two of them idle.
    jobs = ["a", "a", "b", "b", "b", "b", None, None]
    m = mask([500.0, 500.0, 520.0, 480.0, 450.0, 500.0, 70.0, 65.0], jobs)
    assert m[0].tolist() == [False, True, True, True, True, True, False, False]
    # The 4-GPU job has its three: it takes none of job a's.
    assert not m[2, :2].any()


def test_other_parts_and_unmetered_gpus_are_no_peers_across_jobs() -> None:
    m = mask([400.0] * 8, PODS, models=[A100] * 4 + [MODEL] * 4)
    assert not m[:4, 4:].any() and m[:4, :4].sum() == 4 * 3
    # Temperature only: nothing says two pods load their GPUs alike.
    assert not mask([300.0] * 8, PODS, metered=False).any()


STEP = 15.0


def feed(d: ThermalPeers, hours: float, temps_at, powers_at, jobs: list[str]) -> list:
    found = []
    for k in range(int(hours * 3600 / STEP)):
        t = k * STEP
        found += d.update([node(t, [busy(x, p) for x, p in zip(temps_at(t), powers_at(t))],
                                jobs=jobs)])
    return found


def test_a_slow_cooling_failure_on_an_inference_gpu_is_caught_against_the_other_pods() -> None:
    """8 pods at 600 W; GPU 3's heat path degrades over an hour to 9 °C over the others
    (the simulator's cooling_slow stays far under its slowdown temperature)."""
    base = [66.0, 65.0, 67.0, 66.0, 65.0, 66.0, 67.0, 66.0]

    def temps(t: float) -> list[float]:
        drift = min(9.0, max(0.0, t - 1800.0) / 400.0)
        return [x + (drift if i == 3 else 0.0) for i, x in enumerate(base)]

    found = feed(ThermalPeers(), 2.0, temps, lambda t: [600.0] * 8, PODS)
    assert found and {f.gpu for f in found} == {3}
    first = min(f.ts for f in found if f.rule == "gpu_hot_vs_peers")
    assert first < 1800.0 + 3600.0
    assert found[0].evidence["peers"] == 7


def test_pods_changing_load_on_their_own_raise_nothing() -> None:
    """A healthy inference node: each pod's load changes on its own, about every 70 s, so
    its peers across pods come and go with the loads. Each die answers its power as the
    simulator's (collectors/sim/hardware.py): 47% of its rise at once, the rest as its
    heat sink warms, each GPU with its own heat path (within 5%) and time constant."""
    rng = np.random.default_rng(5)
    g, hours = 8, 4.0
    r_th = rng.uniform(0.060, 0.063, g)
    tau = rng.uniform(20.0, 30.0, g)
    switch = np.sort(rng.uniform(0, hours * 3600, (g, 200)), axis=1)
    levels = rng.choice([70.0, 250.0, 450.0, 600.0], (g, 201))
    sink = np.zeros(g)
    found, d = [], ThermalPeers()
    for sec in range(int(hours * 3600)):
        power = levels[np.arange(g), (switch <= sec).sum(axis=1)]
        sink += (1.0 - np.exp(-1.0 / tau)) * (0.53 * r_th * power - sink)
        if sec % STEP == 0:
            temp = np.round(26.0 + 0.47 * r_th * power + sink + rng.normal(0.0, 0.3, g))
            found += d.update([node(float(sec), [busy(x, p) for x, p in zip(temp, power)],
                                    jobs=PODS)])
    assert found == []
