from __future__ import annotations

from typing import Any

from fleetwatch.models.jobs import JobPeers
from tests.models.helpers import MIXED, busy, node, rules


def settled(gpus: list[dict[str, float]], **kw: Any) -> list:
    """The findings on the third of three identical frames 5 s apart: the straggler and
    low-power rules say a GPU once it has been so for SETTLE_S (10 s)."""
    d = JobPeers()
    for t in (0.0, 5.0):
        d.update([node(t, gpus, **kw)])
    return d.update([node(10.0, gpus, **kw)])


def test_a_gpu_idle_while_its_job_peers_work_is_stuck() -> None:
    gpus = [busy(60)] * 7 + [busy(40, 90.0, gpu_util_pct=0.0, gpu_sm_active_ratio=0.0)]
    found = settled(gpus)
    assert rules(found) == [("gpu_stuck", 7)]
    assert found[0].severity == "critical" and found[0].for_s == 60


def test_a_straggler_by_its_clock_and_low_power_against_job_peers() -> None:
    # GPU 5 has half its peers' SM activity: it waits for them (a pipeline stage with more
    # bubbles, a rank that finished its share early), it does not hold them back.
    gpus = [busy(60)] * 5 + [busy(60, gpu_sm_active_ratio=0.4),
                             busy(60, gpu_sm_clock_mhz=1200.0),
                             busy(60, 150.0)]
    d = JobPeers()
    # Said once they have held over SETTLE_S (a pipeline stage ahead of its peers draws the
    # next phase's power for a sample), firing as if timed from the first such sample.
    assert d.update([node(0, gpus)]) == [] and d.update([node(5, gpus)]) == []
    found = d.update([node(10, gpus)])
    assert rules(found) == [("gpu_straggler", 6), ("gpu_power_low_vs_peers", 7)]
    assert [f.for_s for f in found] == [110.0, 110.0]
    assert found[0].evidence["slow_for_s"] == found[1].evidence["low_for_s"] == 10.0
    assert found[0].message == ("GPU 6 on n1 (job job1) lags its job peers: SM clock 1200 MHz "
                                "against 1980, 80% SM activity against 80%")


def test_pipeline_stages_with_more_bubbles_are_not_stragglers() -> None:
    # Four stages of two GPUs: stages 0-1 at 90% SM activity, 2-3 at 50% (more bubbles), all
    # at their boost clock: nobody lags.
    gpus = [busy(70, 650.0, gpu_sm_active_ratio=0.9)] * 4 + \
        [busy(60, 420.0, gpu_sm_active_ratio=0.5)] * 4
    d = JobPeers()
    assert [d.update([node(t * 15.0, gpus)]) for t in range(20)] == [[]] * 20


def test_gpus_of_different_jobs_or_no_job_are_not_peers() -> None:
    gpus = [busy(60)] * 4 + [busy(30, 60.0, gpu_util_pct=0.0, gpu_sm_active_ratio=0.0)] * 4
    jobs = ["a"] * 4 + ["b"] * 4
    assert settled(gpus, jobs=jobs) == []
    assert settled(gpus, job=None) == []


def test_a_hung_kernel_among_working_peers_is_stuck_and_says_so() -> None:
    gpus = [busy(60)] * 7 + [busy(45, 78.0, gpu_util_pct=100.0, gpu_sm_active_ratio=0.0)]
    found = settled(gpus)
    assert rules(found) == [("gpu_stuck", 7)]
    assert found[0].message == ("GPU 7 on n1 (job job1) stuck: a kernel resident (100% "
                                "utilization) but no SM working (0% activity) while its 7 "
                                "job peers run at 80%")


def test_a_gpu_near_zero_while_its_peers_wait_too_is_not_stuck() -> None:
    # The tester's healthy fleet (#10): an exposed all-reduce, NCCL kernels resident on
    # every GPU (100% utilization); peers at 6% SM activity, this one at 0.7%: the phase.
    comm_ = {"gpu_util_pct": 100.0, "gpu_sm_active_ratio": 0.06}
    gpus = [busy(45, 97.0, **comm_)] * 3 + [busy(44, 87.0, **{**comm_,
                                                             "gpu_sm_active_ratio": 0.007})]
    assert settled(gpus) == []
    # Peers with no kernel resident at all (an idle or checkpointing job) neither.
    waiting = {"gpu_util_pct": 0.0, "gpu_sm_active_ratio": 0.01}
    gpus = [busy(40, 62.0, **waiting)] * 7 + [busy(45, 78.0, gpu_util_pct=100.0,
                                                  gpu_sm_active_ratio=0.0)]
    assert settled(gpus) == []


def test_a_power_limit_far_below_the_nodes_other_gpus() -> None:
    gpus = [busy(60, gpu_power_limit_w=700.0)] * 7 + [busy(60, gpu_power_limit_w=230.0)]
    found = settled(gpus, job=None)
    assert rules(found) == [("gpu_power_limit_low", 7)]
    assert found[0].evidence == {"power_limit_w": 230.0, "peer_power_limit_w": 700.0}


def comm(**more: float) -> dict[str, float]:
    """An exposed all-reduce: NCCL kernels resident all the sample, few SMs busy, ~100 W."""
    return busy(45, 105.0, **{"gpu_util_pct": 100.0, "gpu_sm_active_ratio": 0.1, **more})


def test_a_slow_clock_is_a_straggler_in_a_light_phase_too() -> None:
    gpus = [comm()] * 7 + [comm(gpu_sm_clock_mhz=990.0, gpu_sm_active_ratio=0.05)]
    found = settled(gpus)
    assert rules(found) == [("gpu_straggler", 7)]
    assert "SM clock 990 MHz against 1980" in found[0].message


def test_light_phases_leave_a_busy_pipeline_stage_and_an_idle_clock_alone() -> None:
    # The one GPU computing while its peers wait may run a lower clock for power.
    stage = busy(70, 650.0, gpu_sm_clock_mhz=1600.0)
    assert settled([comm()] * 7 + [stage]) == []
    # Without a kernel resident most of the sample, the clock falls to idle between bursts.
    bursty = comm(gpu_util_pct=40.0, gpu_sm_clock_mhz=345.0)
    assert settled([comm()] * 7 + [bursty]) == []


def test_a_hung_gpu_stays_stuck_while_its_peers_wait_until_it_works_again() -> None:
    comm_ = {"gpu_util_pct": 100.0, "gpu_sm_active_ratio": 0.06}
    hung = busy(45, 78.0, gpu_util_pct=100.0, gpu_sm_active_ratio=0.0)
    detector = JobPeers()

    def stuck(ts: float, peers: dict[str, float], gpu: dict[str, float]) -> bool:
        found = detector.update([node(ts, [peers] * 3 + [gpu])])
        return rules(found) == [("gpu_stuck", 3)]

    assert stuck(0, busy(60), hung)                 # found among working peers
    assert stuck(15, busy(45, 97.0, **comm_), hung)  # its peers wait: the hang goes on
    assert not stuck(30, busy(60), busy(60))        # it works again
    assert not stuck(45, busy(45, 97.0, **comm_), hung)  # a wait alone never makes it stuck


def test_a_hung_kernel_in_a_job_that_computes_lightly_is_stuck() -> None:
    # A job whose compute phase runs at 20% SM activity (a small model): below
    # busy_activity, above an NCCL wait; its hung GPU is caught all the same.
    light = {"gpu_util_pct": 99.0, "gpu_sm_active_ratio": 0.2}
    gpus = [busy(50, 150.0, **light)] * 7 + [busy(45, 78.0, gpu_util_pct=100.0,
                                                    gpu_sm_active_ratio=0.0)]
    found = settled(gpus)
    assert rules(found) == [("gpu_stuck", 7)]
    assert found[0].message.endswith("while its 7 job peers run at 20%")


def test_ranks_that_finish_an_evaluation_early_and_wait_in_a_collective_are_not_paged() -> None:
    """A generation eval: ranks 0-2 finish first and wait in an all-gather (NCCL spinning on
    a few SMs, no tensor or DRAM work) for 4 minutes while the others decode. A hung kernel
    reads the same, so only time tells: job_hang_s (300 s), not stuck_for_s (60 s)."""
    from fleetwatch.config import DetectorsConfig
    from fleetwatch.models.registry import build
    from fleetwatch.pipeline.processor import Processor
    from fleetwatch.recording import RecordingStore

    decode = busy(60, 380.0, gpu_sm_active_ratio=0.42, gpu_tensor_active_ratio=0.08,
                  gpu_dram_active_ratio=0.55)
    wait = busy(45, 140.0, gpu_util_pct=100.0, gpu_sm_active_ratio=0.12,
                gpu_tensor_active_ratio=0.0, gpu_dram_active_ratio=1e-5)

    def run(wait_s: float) -> list:
        store = RecordingStore()
        p = Processor(store, build(DetectorsConfig()))
        for i in range(int(wait_s / 10) + 1):
            p.process([node(1.7e9 + i * 10.0, [wait] * 3 + [decode] * 5)])
        return [a for a in store.changes if a.state == "firing"]

    assert run(240.0) == []
    fired = run(330.0)
    assert {(a.rule, a.device) for a in fired} == {("gpu_stuck", "gpu0"), ("gpu_stuck", "gpu1"),
                                                   ("gpu_stuck", "gpu2")}
    assert {a.fired_ts - 1.7e9 for a in fired} == {300.0}


def test_a_straggler_whose_job_waits_for_it_is_found_by_its_clock() -> None:
    """In lockstep a straggler computes the whole step while its peers wait (their SM
    activity below busy_activity): it still runs under its power limit at a clock far below
    theirs. A pipeline stage that computes at its power cap, clock lowered by the cap, while
    the others wait, is not a straggler."""
    limit = {"gpu_power_limit_w": 500.0, "gpu_util_pct": 100.0}
    waiting = busy(50, 160.0, gpu_sm_active_ratio=0.25, gpu_sm_clock_mhz=1410.0, **limit)
    slow = busy(55, 300.0, gpu_sm_active_ratio=0.8, gpu_sm_clock_mhz=705.0, **limit)
    found = settled([waiting] * 7 + [slow])
    assert rules(found) == [("gpu_straggler", 7)]
    at_cap = busy(70, 498.0, gpu_sm_active_ratio=0.9, gpu_sm_clock_mhz=1100.0,
                  gpu_throttle_reasons=0x4, **limit)
    assert settled([waiting] * 6 + [at_cap] * 2) == []
    # Without throttle reasons, its power at the limit says the same.
    near = {**at_cap}
    del near["gpu_throttle_reasons"]
    assert settled([waiting] * 6 + [near] * 2) == []


def _mixed(a100: dict[str, float], h100: dict[str, float]) -> list[dict[str, float]]:
    return [{**busy(60), **a100}] * 4 + [{**busy(60), **h100}] * 4


def test_a_node_mixing_a100s_and_h100s_in_one_job_compares_clocks_and_power_by_part() -> None:
    # At full load an A100 runs at its 1410 MHz maximum and ~400 W of its 500 W limit, an
    # H100 at 1980 MHz and ~690 W of 700: healthy, though 0.71 the clock and 0.58 the power.
    a100 = {"gpu_sm_clock_mhz": 1410.0, "gpu_power_w": 400.0, "gpu_power_limit_w": 500.0}
    h100 = {"gpu_sm_clock_mhz": 1980.0, "gpu_power_w": 690.0, "gpu_power_limit_w": 700.0}
    d = JobPeers()
    found = [f for t in range(0, 300, 15) for f in d.update([node(t, _mixed(a100, h100),
                                                                  models=MIXED)])]
    assert found == []
    # An A100 that really lags its A100 peers is still a straggler and draws little.
    gpus = _mixed(a100, h100)
    gpus[2] = {**gpus[2], "gpu_sm_clock_mhz": 900.0, "gpu_power_w": 200.0}
    found = [f for t in range(300, 330, 15) for f in d.update([node(t, gpus, models=MIXED)])]
    assert rules(found[-2:]) == [("gpu_straggler", 2), ("gpu_power_low_vs_peers", 2)]
    assert "SM clock 900 MHz against 1410" in found[-2].message
    assert found[-1].evidence["peer_power_w"] == 400.0


def test_a_board_that_differs_only_in_memory_size_is_judged_with_its_peers() -> None:
    """One A100-SXM4-40GB among seven A100-SXM4-80GB: the same clocks and heat path. Compared
    by the exact model name it had no peer, and its straggling went unpaged."""
    models = ["NVIDIA A100-SXM4-40GB"] + ["NVIDIA A100-SXM4-80GB"] * 7
    a100 = {"gpu_sm_clock_mhz": 1410.0, "gpu_power_w": 400.0, "gpu_power_limit_w": 400.0}
    gpus = [{**busy(60), **a100} for _ in range(8)]
    assert settled(gpus, models=models) == []
    gpus[0] = {**gpus[0], "gpu_sm_clock_mhz": 700.0, "gpu_power_limit_w": 150.0}
    found = settled(gpus, models=models)
    assert ("gpu_straggler", 0) in rules(found) and ("gpu_power_limit_low", 0) in rules(found)


def test_a_power_limit_is_compared_with_the_other_gpus_of_its_part_on_a_mixed_node() -> None:
    a100 = {"gpu_power_limit_w": 400.0}
    h100 = {"gpu_power_limit_w": 700.0}
    assert settled(_mixed(a100, h100), models=MIXED) == []
    gpus = _mixed(a100, h100)
    gpus[1] = {**gpus[1], "gpu_power_limit_w": 200.0}
    found = settled(gpus, models=MIXED)
    assert rules(found) == [("gpu_power_limit_low", 1)]
    assert found[0].evidence == {"power_limit_w": 200.0, "peer_power_limit_w": 400.0}

def test_pipeline_stages_a_few_seconds_apart_raise_no_low_power_candidate() -> None:
    """A job swinging between compute (420 W) and an exposed all-reduce (110 W) every 30 s,
    sampled every 5 s; GPU 0's stage 3 s ahead of its peers: at each change to the all-reduce
    one sample of it is already low. That is no candidate at all, not a pending alert a
    minute."""
    compute = busy(60, 420.0, gpu_sm_active_ratio=0.8)
    allreduce = busy(55, 110.0, gpu_sm_active_ratio=0.1, gpu_util_pct=100.0)

    def phase(t: float) -> dict[str, float]:
        return compute if int(t // 30) % 2 == 0 else allreduce

    d = JobPeers()
    found = []
    for t in range(3, 3600, 5):  # a sample 2 s before each change of phase
        found += d.update([node(t, [phase(t + 3)] + [phase(t)] * 7)])
    assert found == []
    # A GPU braked for real draws little every sample: found, its alert firing as if timed
    # from its first low sample (the for-duration less what the candidate waited for).
    braked = busy(60, 150.0, gpu_sm_active_ratio=0.8)
    found = [f for t in range(3603, 3623, 5)
             for f in d.update([node(t, [braked] + [compute] * 7)])]
    assert [(f.rule, f.ts, f.for_s) for f in found] == [
        ("gpu_power_low_vs_peers", 3613, 110.0), ("gpu_power_low_vs_peers", 3618, 110.0)]



def test_a_clock_cut_for_a_sample_at_the_power_cap_is_no_straggler_candidate() -> None:
    """H100s computing at 675 W of 700: one touches its cap for a sample now and then, its
    clock cut for that sample (the physics replay saw 1,110 such one- and two-sample dips on
    four H100s in 3 h); one that stays slow is a straggler after SETTLE_S."""
    h100 = busy(60, 675.0, gpu_power_limit_w=700.0)
    capped = busy(62, 699.0, gpu_power_limit_w=700.0, gpu_sm_clock_mhz=1445.0,
                  gpu_throttle_reasons=0x4)
    d = JobPeers()
    found = []
    for k in range(360):
        found += d.update([node(5.0 * k, [capped if k % 3 == 0 else h100] + [h100] * 7)])
    assert found == []
    found = [f for k in range(360, 364) for f in d.update([node(5.0 * k, [capped] + [h100] * 7)])]
    assert [(f.rule, f.gpu, f.ts) for f in found] == [("gpu_straggler", 0, 1810.0),
                                                      ("gpu_straggler", 0, 1815.0)]


def test_the_stores_alert_history_holds_no_pending_churn_from_pipeline_stages() -> None:
    """Through the processor: the stage 3 s ahead leaves no pending/resolved pair a minute in
    the store's alert history; a braked GPU fires power_low_for_s after its first low sample."""
    from fleetwatch.config import DetectorsConfig
    from fleetwatch.models.registry import build
    from fleetwatch.pipeline.processor import Processor
    from fleetwatch.recording import RecordingStore

    compute = busy(60, 420.0, gpu_sm_active_ratio=0.8)
    allreduce = busy(55, 110.0, gpu_sm_active_ratio=0.1, gpu_util_pct=100.0)

    def phase(t: float) -> dict[str, float]:
        return compute if int(t // 30) % 2 == 0 else allreduce

    store = RecordingStore()
    p = Processor(store, build(DetectorsConfig()))
    t0 = 1.7e9
    for t in range(3, 1800, 5):
        p.process([node(t0 + t, [phase(t + 3)] + [phase(t)] * 7)])
    assert [a for a in store.changes if a.rule == "gpu_power_low_vs_peers"] == []
    braked = busy(60, 150.0, gpu_sm_active_ratio=0.8)
    for t in range(1803, 2000, 5):
        p.process([node(t0 + t, [braked] + [compute] * 7)])
    low = [(a.state, a.started_ts - t0, (a.fired_ts or 0) - t0) for a in store.changes
           if a.rule == "gpu_power_low_vs_peers"]
    assert low[0] == ("pending", 1813.0, -t0) and low[-1] == ("firing", 1813.0, 1923.0)
