"""The simulator's job_hang fault: the job on the named node blocks on all its nodes, its links
go quiet while a healthy communication phase moves GB/s, and job_hung catches it there and
nowhere else; scored by ``fleetwatch evaluate`` against every node of the job."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from fleetwatch.collectors.sim.faults import Fault, parse_fault
from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, GpuReading, HostReading, PortReading
from fleetwatch.models.batch import columns
from fleetwatch.models.job_hang import JobHang
from fleetwatch.models.registry import build
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.scoring import Truth, score

START = 1.7e9
STEP = 15.0


def fleet(part: str, faults: list[Fault]) -> FleetSim:
    """A fleet of 8 nodes whose nodes 2 and 3 run one job together from the start."""
    sim = FleetSim(SimParams(nodes=8, gpus=8, nodes_per_rack=2, interval_s=STEP, part=part),
                   START, faults)
    for n in (2, 3):
        sim.kill_job_on(n)
    job = sim.jobs.start([2, 3], sim.ts, 8 * 3600.0)
    sim.jobs._enter(job, "comm", sim.ts)
    job.phase_end = START + 3 * 3600.0  # an exposed all-reduce until the fault and beyond
    return sim


def links(frames: list[Frame], node: str) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU of the node: NVLink bytes since the driver loaded, PCIe bytes/s, both ways."""
    f = next(f for f in frames if f.node == node)
    m = [g.metrics for g in f.gpus]
    return (np.array([x["gpu_nvlink_tx_bytes_total"] + x["gpu_nvlink_rx_bytes_total"] for x in m]),
            np.array([x["gpu_pcie_tx_bytes_per_s"] + x["gpu_pcie_rx_bytes_per_s"] for x in m]))


def test_job_hang_is_a_node_fault_and_parses() -> None:
    f = parse_fault("job_hang:node-003@1h+20m")
    assert (f.kind, f.node, f.gpu, f.start_s, f.duration_s, f.resolved_mode) == (
        "job_hang", "node-003", None, 3600.0, 1200.0, "sudden")
    with pytest.raises(ValueError, match="whole node"):
        parse_fault("job_hang:node-003/1")


@pytest.mark.parametrize(("part", "peak"), [("a100", 300e9), ("h100", 450e9)])
def test_a_comm_phase_moves_gbs_and_a_hung_job_moves_nothing_on_all_its_nodes(
        part: str, peak: float) -> None:
    sim = fleet(part, [Fault("job_hang", "node-003", None, 600.0, 1200.0)])
    job = sim.node_jobs[3]
    samples = []
    for _ in range(int(1500 / STEP)):
        sim.step()
        samples.append(sim.frames())
    before, after = samples[30], samples[31]            # t = 465 s, 480 s: healthy comm
    nv0, _ = links(before, "node-002")
    nv1, pcie = links(after, "node-002")
    per_direction = (nv1 - nv0) / STEP / 2
    # An exposed all-reduce: ~0.35 of the links' peak each way; to the NICs over PCIe.
    assert np.all((per_direction > 0.2 * peak) & (per_direction < 0.5 * peak))
    assert np.all(pcie > 2e9)
    hung = samples[60:]                                  # t = 915 s on: the fault since 600 s
    for node in ("node-002", "node-003"):
        nv_a, _ = links(hung[0], node)
        nv_b, pcie = links(hung[-1], node)
        assert np.all(nv_a == nv_b)                      # NVLink counters stand still
        assert np.all(pcie < 2e6)                        # PCIe: the driver's few hundred KB/s
        f = next(f for f in hung[-1] if f.node == node)
        ratios = [(g.metrics["gpu_util_pct"], g.metrics["gpu_sm_active_ratio"],
                   g.metrics["gpu_tensor_active_ratio"], g.metrics["gpu_power_w"])
                  for g in f.gpus]
        assert all(u == 100.0 and 0.02 <= s <= 0.12 and t == 0.0 and p < 0.4 * f.gpus[0]
                   .metrics["gpu_power_limit_w"] for u, s, t, p in ratios)
    truth = sim.ground_truth[0]
    assert (truth.nodes, truth.job, truth.first_faulty_ts) == (
        ("node-002", "node-003"), job, START + 600.0)


def test_the_fault_ends_with_the_job_killed() -> None:
    sim = fleet("a100", [Fault("job_hang", "node-002", None, 600.0, 900.0)])
    job = sim.node_jobs[2]
    for _ in range(int(1560 / STEP)):
        sim.step()
    assert sim.node_jobs[2] is None and sim.node_jobs[3] is None
    assert sim.ground_truth[0].job == job


def test_job_hung_fires_once_for_the_job_naming_its_nodes_and_nowhere_else() -> None:
    sim = fleet("h100", [Fault("job_hang", "node-002", None, 1200.0, 1800.0)])
    job = sim.node_jobs[2]
    detectors, book, fired, messages = build(DetectorsConfig()), AlertBook(), [], []
    for _ in range(int(3600 / STEP)):
        sim.step()
        frames = sim.frames()
        changes = book.observe(frames, [x for d in detectors for x in d.update(frames)])
        book.apply(changes)
        fired += [a for a in changes if a.state == "firing" and a.fired_ts == a.updated_ts]
        messages += [a.message for a in changes]
    # One alert for the job (on 2 nodes), on its first node, naming the other.
    assert sorted((a.rule, a.node) for a in fired) == [("job_hung", "node-002")]
    assert "also hung on node-003 (2 nodes)" in messages[-1]
    delays = [a.fired_ts - (START + 1200.0) for a in fired]
    assert all(300.0 <= d <= 300.0 + 2 * STEP for d in delays)
    assert fired[0].message.startswith(f"job {job} hung on node-00")
    assert "its 8 GPUs have a kernel resident (100% utilization)" in fired[0].message


def test_evaluate_scores_alerts_on_any_node_of_the_hung_job() -> None:
    t = Truth("job_hang", "sudden", "r1", "n1", None, 100.0, 1000.0, 100.0, True,
              ("n1", "n2", "n3"))

    def alert(node: str, fired: float) -> Alert:
        return Alert(f"job_hung/c/{node}/host/{fired}", "job_hung", "critical", "c", "r1", node,
                     "host", "firing", fired, fired, 1.0, "", fired_ts=fired)

    s = score([t], [alert("n2", 400.0), alert("n3", 415.0), alert("n9", 400.0)])
    row = s["kinds"]["job_hang"]
    assert (row["recall"], row["delay_p50_s"], row["rules"]) == (1.0, 300.0, ["job_hung"])
    assert (s["alerts"], s["false_alarms"]) == (3, 1)       # n9 is no node of the job


def test_the_real_h100_recording_is_never_a_hung_job() -> None:
    """Idle, clocked up and at 700 W under matrix products, two copies of the real GPU in one
    job, even with links that say nothing moves (PCIe at 0): never job_hung. Its one sample
    with a kernel resident on few SMs at low power is the load starting (SM activity 0.20,
    tensor 0.19: GPM's window half before the first kernel): tensor work, not a hang."""
    from tests.conftest import REAL_DATA

    frames = []
    with gzip.open(REAL_DATA / "recorded/h100_gemm_load.jsonl.gz", "rt") as f:
        for line in f:
            d = json.loads(line)
            d.pop("_phase")
            real = d["gpus"][0]
            quiet = {**real["metrics"], "gpu_pcie_tx_bytes_per_s": 0.0,
                     "gpu_pcie_rx_bytes_per_s": 0.0}
            gpus = tuple(GpuReading(i, f"{real['uuid']}-{i}", real["model"], quiet, "j")
                         for i in range(2))
            frames.append(Frame(**{**d, "gpus": gpus, "host": HostReading(
                d["host"]["metrics"], tuple(PortReading(**p) for p in d["host"]["ports"]))}))
    signature = JobHang()._signature(columns(frames))
    assert [round(frames[i].gpus[0].metrics["gpu_tensor_active_ratio"], 2)
            for i in np.flatnonzero(signature.all(axis=1))] == [0.19]
    detector = JobHang()
    assert [x for f in frames for x in detector.update([f])] == []
    loaded = [f for f in frames if f.gpus[0].metrics["gpu_util_pct"] >= 90]
    assert len(loaded) > 100                            # the two minutes of matrix products


def test_two_hang_faults_on_one_job_hang_two_jobs() -> None:
    """A second job_hang on a node whose job another fault hangs already waits for the next
    job there: one job cannot hang twice, and each fault has its own job to be found by."""
    sim = FleetSim(SimParams(nodes=4, gpus=2, nodes_per_rack=2, seed=3, interval_s=15.0),
                   START, [Fault("job_hang", "node-000", None, 900.0, 1800.0),
                           Fault("job_hang", "node-000", None, 1200.0, 7200.0)])
    for _ in range(int(9000 / 15)):
        sim.step()
    first, second = sim.ground_truth
    assert first.job is not None and second.job is not None
    assert first.job != second.job
    assert second.first_faulty_ts > first.end_ts - 1.0
