"""job_hung: every GPU of a job on a node blocked in a collective, moving no bytes, on frames
built by hand; and through the real Processor with the default detectors."""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, HostReading, PortReading
from fleetwatch.models.job_hang import JobHang
from fleetwatch.models.jobs import JobPeers
from fleetwatch.models.registry import build
from fleetwatch.pipeline.processor import Processor
from fleetwatch.recording import RecordingStore
from tests.models.helpers import node, rules

STEP = 15.0
NVLINK_GB_S = 100.0  # a healthy exposed all-reduce: ~ a quarter of H100 NVLink's 450 GB/s


def gpu(t: float, moving_gb_s: float = 0.0, util: float = 100.0, sm: float = 0.08,
        power: float = 150.0, pcie: float = 0.4e6, **more: float) -> dict[str, float]:
    """An H100 at time ``t``: NVLink counters that have moved ``moving_gb_s`` each way
    since t = 0, PCIe at ``pcie`` bytes/s each way."""
    moved = moving_gb_s * 1e9 * t
    return {"gpu_util_pct": util, "gpu_sm_active_ratio": sm, "gpu_tensor_active_ratio": 0.0,
            "gpu_power_w": power, "gpu_power_limit_w": 700.0, "gpu_temp_c": 45.0,
            "gpu_sm_clock_mhz": 1980.0, "gpu_nvlink_tx_bytes_total": 5e12 + moved,
            "gpu_nvlink_rx_bytes_total": 4e12 + moved, "gpu_pcie_tx_bytes_per_s": pcie,
            "gpu_pcie_rx_bytes_per_s": pcie, **more}


def run(frames_at: Sequence[Sequence[Frame]], detector: JobHang | None = None) -> list:
    d = detector or JobHang()
    return [f for frames in frames_at for f in d.update(frames)]


def series(minutes: float, per_gpu, name: str = "n1", **kw) -> list[list[Frame]]:
    return [[node(i * STEP, [g(i * STEP) for g in per_gpu], name=name, **kw)]
            for i in range(int(minutes * 60 / STEP) + 1)]


def test_a_hung_job_is_found_on_its_node_with_the_evidence_in_real_units() -> None:
    found = run(series(10, [gpu] * 8))
    # The NVLink counters give a rate from the second sample on: judged from there.
    assert [f.ts for f in found] == [i * STEP for i in range(1, 41)]
    last = found[-1]
    assert (last.rule, last.node, last.gpu, last.scope, last.severity, last.for_s) == (
        "job_hung", "n1", None, "node", "critical", 300.0)
    assert last.message == ("job job1 hung on n1: its 8 GPUs have a kernel resident (100% "
                            "utilization) on few SMs (8% SM activity) and move no data (at "
                            "most 0.8 MB/s over NVLink and PCIe) for 585 s")
    assert last.evidence == {"gpus": 8.0, "util_pct": 100.0, "moved_bytes_per_s": 800000.0,
                             "hung_s": 585.0, "sm_active": 0.08, "power_w": 150.0}
    assert "py-spy dump" in last.action and "checkpoint" in last.action


def test_a_healthy_communication_phase_moving_bytes_for_ten_minutes_is_not_a_hang() -> None:
    # The same counters a hang shows (100% utilization, 8% SM activity, low power), but
    # NVLink moves 100 GB/s each way: an exposed all-reduce, however long.
    comm = [lambda t: gpu(t, NVLINK_GB_S)] * 8
    assert run(series(10, comm)) == []
    # Multi-node: NVLink quiet but the GPUs' PCIe carries the traffic to the NICs.
    rdma = [lambda t: gpu(t, pcie=12e9)] * 8
    assert run(series(10, rdma)) == []


def test_a_checkpoint_an_idle_job_or_a_compute_phase_is_not_a_hang() -> None:
    checkpoint = [lambda t: gpu(t, util=12.0, sm=0.01, power=90.0, pcie=6e9)] * 8
    idle = [lambda t: gpu(t, util=0.0, sm=0.0, power=72.0)] * 8
    # Compute with little traffic: SMs, tensor pipes and power busy.
    compute = [lambda t: gpu(t, sm=0.85, power=650.0, gpu_tensor_active_ratio=0.7)] * 8
    tensor = [lambda t: gpu(t, gpu_tensor_active_ratio=0.4)] * 8
    for phase in (checkpoint, idle, compute, tensor):
        assert run(series(10, phase)) == []


def test_the_bytes_moved_on_infiniband_count_and_no_byte_counter_is_not_judged() -> None:
    def with_ib(ib: float) -> list[list[Frame]]:
        out = []
        for frames in series(10, [gpu] * 8):
            f = frames[0]
            port = PortReading("mlx5_0/1", "ib", {"ib_tx_bytes_per_s": ib,
                                                 "ib_rx_bytes_per_s": ib})
            out.append([Frame(f.cluster, f.rack, f.node, f.ts, f.gpus,
                              HostReading({}, (port,)))])
        return out

    assert run(with_ib(20e9)) == []
    quiet = run(with_ib(1e4))
    assert quiet and quiet[-1].evidence["ib_bytes_per_s"] == 20000.0
    assert "InfiniBand 0.0 MB/s" in quiet[-1].message
    # Without NVLink counters and PCIe throughput a hang and a long communication-bound
    # phase look the same: not judged, whatever the other counters say.
    blind = [lambda t: {k: v for k, v in gpu(t).items()
                        if not k.startswith(("gpu_nvlink", "gpu_pcie"))}] * 8
    assert run(series(10, blind)) == []
    # PCIe alone is enough to judge (a PCIe card, a driver without NVLink counters).
    pcie_only = [lambda t: {k: v for k, v in gpu(t).items() if not k.startswith("gpu_nvlink")}]
    found = run(series(10, pcie_only * 8))
    assert found[0].ts == 0.0 and found[-1].evidence["hung_s"] == 600.0


def test_a_job_over_many_nodes_is_one_finding_naming_its_nodes_and_a_one_gpu_job_is_not_judged(
        ) -> None:
    d = JobHang()
    found = []
    for i in range(41):
        t = i * STEP
        found += d.update([node(t, [gpu(t)] * 8, name=n, job="big") for n in ("n1", "n2", "n3")])
    # One per job: on the node hung first (the first by name among equals), naming the others.
    assert {f.node for f in found} == {"n1"}
    assert all(f.message.startswith("job big hung on n1") for f in found)
    assert "also hung on n2, n3 (3 nodes)" in found[-1].message
    assert found[-1].evidence["job_nodes"] == 3.0
    # Two jobs on one node: the hung one is judged on its own GPUs.
    jobs = ["a"] * 4 + ["b"] * 4
    mixed = [gpu] * 4 + [lambda t: gpu(t, NVLINK_GB_S)] * 4
    found = run(series(10, mixed, jobs=jobs))
    assert found and all(f.message.startswith("job a hung on n1: its 4 GPUs") for f in found)
    # A job with one GPU on the node has no collective peer there.
    assert run(series(10, [gpu])) == []
    lone = [gpu] + [lambda t: gpu(t, util=0.0, sm=0.0)] * 7
    assert run(series(10, lone, jobs=["a"] + [None] * 7)) == []


def test_the_hang_must_hold_on_every_gpu_and_a_sample_that_moves_restarts_it() -> None:
    d = JobHang()
    found = run(series(4, [gpu] * 8), d)
    assert found[-1].evidence["hung_s"] == 225.0
    # The job moves data again (a slow collective finished): the wait is over.
    t = 5 * 60.0
    assert d.update([node(t, [gpu(t, NVLINK_GB_S)] * 8)]) == []
    t += STEP
    again = d.update([node(t, [gpu(t, NVLINK_GB_S)] * 8)])
    assert again == []
    t += STEP
    # ... and moves nothing from here: the hang starts over, now.
    last = gpu(t, NVLINK_GB_S)
    t2 = t + STEP
    still = {**gpu(t2), "gpu_nvlink_tx_bytes_total": last["gpu_nvlink_tx_bytes_total"],
             "gpu_nvlink_rx_bytes_total": last["gpu_nvlink_rx_bytes_total"]}
    d.update([node(t, [last] * 8)])
    found = d.update([node(t2, [still] * 8)])
    assert [f.evidence["hung_s"] for f in found] == [0.0]


def test_one_gpu_stuck_while_its_peers_work_is_gpu_stuck_not_job_hung() -> None:
    def working(t: float) -> dict[str, float]:
        return gpu(t, 40.0, sm=0.85, power=650.0, gpu_tensor_active_ratio=0.7)

    def stuck(t: float) -> dict[str, float]:
        return gpu(t, util=100.0, sm=0.0, power=140.0)

    frames = series(10, [working] * 7 + [stuck])
    peers, hang = JobPeers(), JobHang()
    found = [x for fs in frames for d in (peers, hang) for x in d.update(fs)]
    assert set(rules(found)) == {("gpu_stuck", 7)}


def test_through_the_processor_a_hung_job_fires_once_after_job_hang_s() -> None:
    store = RecordingStore()
    processor = Processor(store, build(DetectorsConfig()))
    for i in range(41):
        t = 1.7e9 + i * STEP
        processor.process([node(t, [gpu(t)] * 8, name=n, rack=r, job="big")
                           for n, r in (("n1", "r1"), ("n2", "r2"))])
    firing = {(a.rule, a.node, a.device): a for a in store.changes if a.state == "firing"}
    assert set(firing) == {("job_hung", "n1", "host")}   # one page for the job, not per node
    # Judged from the second sample (the first NVLink rate), firing job_hang_s later.
    assert {a.fired_ts - 1.7e9 for a in firing.values()} == {STEP + 300.0}
    # Nothing else: no GPU of the hung job is called stuck or a straggler.
    assert {a.rule for a in store.changes} == {"job_hung"}


def test_job_hang_s_is_a_detector_setting() -> None:
    assert DetectorsConfig().job_hang_s == 300.0
    found = run(series(2, [gpu] * 8), JobHang(DetectorsConfig(job_hang_s=60.0)))
    assert found[0].for_s == 60.0


def test_a_lost_gpu_of_the_job_is_not_one_of_the_waiting_ranks() -> None:
    # GPU 7 fell off the bus (an XID 79 took it): the other seven wait for it.
    found = run(series(10, [gpu] * 8, lost=[7]))
    assert found and found[-1].message.startswith("job job1 hung on n1: its 7 GPUs")


def _two_nodes(minutes: float, rank0, d: JobHang | None = None, fb: float = 60e9,
               start: float = 0.0) -> list:
    """A job on two nodes: rank 0 (GPU 0 on n1) does ``rank0``; every other rank waits in a
    collective (the hung signature), holding ``fb`` bytes of GPU memory each."""
    d = d or JobHang()
    found = []
    for i in range(int(minutes * 60 / STEP) + 1):
        t = start + i * STEP
        waiting = gpu(t, sm=0.12, power=140.0, gpu_fb_used_bytes=fb)
        n1 = node(t, [rank0(t)] + [waiting] * 7, name="n1", job="llm")
        n2 = node(t, [waiting] * 8, name="n2", job="llm")
        found += d.update([n1, n2])
    return found


def test_ranks_waiting_for_a_rank_that_checkpoints_or_debugs_on_another_node_are_not_hung(
        ) -> None:
    """Rank 0 writes a 12-minute checkpoint from the host (or sits in pdb, or stalls on its
    input) with its memory held; the other 15 ranks wait in a barrier. n2's eight GPUs all
    show the hung signature, but the job is alive on n1: a warning after job_wait_s, not a
    page after job_hang_s."""
    def host_stall(t: float) -> dict[str, float]:
        return gpu(t, util=0.0, sm=0.0, power=116.0, gpu_fb_used_bytes=62e9)

    found = _two_nodes(15, host_stall)
    assert found and {(f.rule, f.node, f.severity) for f in found} == {
        ("job_waiting", "n2", "warning")}
    last = found[-1]
    assert last.for_s == DetectorsConfig().job_wait_s == 1800.0
    assert last.evidence["waiting_for_gpu"] == 0.0 and last.evidence["hung_s"] == 885.0
    assert last.message.startswith(
        "job llm on n2: its 8 GPUs have waited in a collective for 885 s, moving no data, "
        "while GPU 0 on n1 of the same job is not in one")
    assert "py-spy dump" in last.action and "n1" in last.action
    # A slow node that still computes holds the others the same way.
    computing = _two_nodes(15, lambda t: gpu(t, sm=0.9, power=650.0,
                                             gpu_tensor_active_ratio=0.6))
    assert {f.rule for f in computing} == {"job_waiting"}


def test_a_rank_that_died_does_not_hold_the_page_and_its_rank_joining_the_wait_pages() -> None:
    # Rank 0's process is gone: its GPU is idle with its memory freed. The others wait
    # forever: job_hung on n2, as before.
    dead = _two_nodes(10, lambda t: gpu(t, util=0.0, sm=0.0, power=70.0, gpu_fb_used_bytes=0.0))
    assert dead and {(f.rule, f.node) for f in dead} == {("job_hung", "n2")}
    # Rank 0 finishes its checkpoint and blocks too: every rank waits, the job is hung.
    d = JobHang()
    _two_nodes(5, lambda t: gpu(t, util=0.0, sm=0.0, power=116.0, gpu_fb_used_bytes=62e9), d)
    later = _two_nodes(10, lambda t: gpu(t, sm=0.12, power=140.0, gpu_fb_used_bytes=62e9), d,
                       start=5 * 60.0 + STEP)
    # n1 and n2 both hung; n2's "waiting" ends once the live rank is 2 minutes old.
    at_end = [f for f in later if f.ts >= later[-1].ts]
    # One finding for the job, on n2 (hung first), naming n1.
    assert {(f.rule, f.node) for f in at_end} == {("job_hung", "n2")}
    assert "also hung on n1" in at_end[0].message


def test_the_gpu_spinning_on_the_fewest_sms_is_named() -> None:
    # GPU 3 runs the real hung H100 kernel (6% of the SMs); the other ranks wait in NCCL (12%).
    per_gpu = [lambda t: gpu(t, sm=0.12)] * 3 + [lambda t: gpu(t, sm=0.06)] + \
        [lambda t: gpu(t, sm=0.12)] * 4
    last = run(series(6, per_gpu))[-1]
    assert last.evidence["lowest_sm_gpu"] == 3.0 and last.evidence["lowest_sm_active"] == 0.06
    assert last.message.endswith("; GPU 3 spins on the fewest SMs (6%): look at its rank first")
    # Ranks that all read alike name none.
    assert "lowest_sm_gpu" not in run(series(6, [gpu] * 8))[-1].evidence


def test_without_a_memory_reading_only_a_kernel_that_ran_says_a_rank_lives() -> None:
    """Data with no gpu_fb_used_bytes (older exports, DCGM without FB_USED): an idle GPU of
    the job may be a rank that died, so it does not hold the page; one with a kernel
    resident (a slow node still computing) does."""
    d = JobHang()
    found = []
    for i in range(int(10 * 60 / STEP) + 1):
        t = i * STEP
        waiting = gpu(t, sm=0.12, power=140.0)          # no gpu_fb_used_bytes anywhere
        dead = gpu(t, util=0.0, sm=0.0, power=70.0)
        found += d.update([node(t, [dead] + [waiting] * 7, name="n1", job="llm"),
                           node(t, [waiting] * 8, name="n2", job="llm")])
    assert found and {(f.rule, f.node) for f in found} == {("job_hung", "n2")}
    computing = _two_nodes(10, lambda t: gpu(t, sm=0.9, power=650.0, util=100.0,
                                             gpu_tensor_active_ratio=0.6), fb=60e9)
    assert {f.rule for f in computing} == {"job_waiting"}
    assert "(a kernel resident 100% of the time)" in computing[-1].message


def test_the_waiting_message_says_what_the_live_rank_shows() -> None:
    found = _two_nodes(3, lambda t: gpu(t, util=0.0, sm=0.0, power=116.0,
                                        gpu_fb_used_bytes=62e9))
    assert "GPU 0 on n1 of the same job is not in one (no kernel, 57.7 GiB of its memory " \
        "held): that rank is busy elsewhere or stalled on its host" in found[-1].message
    assert found[-1].evidence["waiting_for_fb_used_bytes"] == 62e9


def test_an_ib_port_whose_byte_rate_is_unknown_is_not_taken_as_idle() -> None:
    # A saturated 32-bit port_xmit_data gives no tx rate: the port may be busy.
    def with_port(metrics: dict[str, float]) -> list[list[Frame]]:
        out = []
        for frames in series(10, [gpu] * 8):
            f = frames[0]
            port = PortReading("mlx5_1/1", "ib", metrics)
            out.append([Frame(f.cluster, f.rack, f.node, f.ts, f.gpus,
                              HostReading({}, (port,)))])
        return out

    assert run(with_port({"ib_rx_bytes_per_s": 0.0, "ib_port_active": 1.0})) == []
    # Both rates known and quiet: judged as before.
    assert run(with_port({"ib_rx_bytes_per_s": 0.0, "ib_tx_bytes_per_s": 0.0,
                          "ib_port_active": 1.0}))
