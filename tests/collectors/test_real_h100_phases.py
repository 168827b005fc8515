"""A real H100 through five phases as fleetwatch's agent read it through NVML, one frame a
second (tests/data/recorded/h100_phases.jsonl.gz, origin in tests/data/README.md): 10 s
with a process holding the GPU and no kernel, 50 s of device-to-device copies (memory-bound),
50 s of bf16 matrix products (compute-bound, at the 700 W cap), 45 s of eight one-block
kernels spinning (a hung kernel: resident all the time, nothing computed, no memory
touched), then 45 s with no kernel."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

from fleetwatch.catalogue import catalogue
from fleetwatch.codec import decode, encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models.jobs import JobPeers
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.wiring import detectors
from tests.collectors.recorded_frames import read_recording

SERIES = "recorded/h100_phases.jsonl.gz"


@pytest.fixture(scope="module")
def recorded() -> list[tuple[str, Frame]]:
    return read_recording(SERIES)


def phase(recorded, name: str, skip: int = 5) -> list[Frame]:
    """The frames of a phase after its first ``skip`` seconds (the change settles)."""
    return [f for p, f in recorded if p == name][skip:]


def med(frames: list[Frame], key: str) -> float:
    return statistics.median(f.gpus[0].metrics[key] for f in frames)


def test_the_codec_takes_every_real_frame_and_the_phases_read_as_their_physics(
        recorded) -> None:
    names = catalogue()
    assert len(recorded) == 200
    assert [p for i, (p, _) in enumerate(recorded) if i == 0 or recorded[i - 1][0] != p] == \
        ["idle", "copy", "gemm", "spin", "idle"]
    for _, f in recorded:
        assert decode(encode(f)) == f
        assert f.gpus[0].state == "ok" and all(n in names for n in f.gpus[0].metrics)
    copy, gemm, spin = (phase(recorded, p) for p in ("copy", "gemm", "spin"))
    # Memory-bound: DRAM busy, no tensor cores, ~400 W, the HBM warmer than the die.
    assert med(copy, "gpu_dram_active_ratio") > 0.85 and med(copy, "gpu_tensor_active_ratio") == 0
    assert 380 < med(copy, "gpu_power_w") < 420
    assert med(copy, "gpu_mem_temp_c") > med(copy, "gpu_temp_c") + 5
    # Compute-bound: tensor cores busy, at the cap, the HBM cooler than the die.
    assert med(gemm, "gpu_tensor_active_ratio") > 0.9 and med(gemm, "gpu_power_w") > 690
    # Hung: a kernel resident the whole sample, 8 of 132 SMs active, nothing else, and the
    # power of a GPU holding its clock with no work.
    assert min(f.gpus[0].metrics["gpu_util_pct"] for f in spin) == 100
    assert med(spin, "gpu_sm_active_ratio") == pytest.approx(8 / 132, abs=0.002)
    assert med(spin, "gpu_tensor_active_ratio") == 0
    assert med(spin, "gpu_dram_active_ratio") < 1e-4
    assert med(spin, "gpu_power_w") < med(phase(recorded, "idle"), "gpu_power_w") + 15


def test_every_configured_detector_leaves_the_healthy_and_the_lone_gpu_alone(
        recorded, tmp_path: Path) -> None:
    """One GPU, one job: a hung kernel here has no job peers to be judged against, and no
    phase of real work (memory-bound HBM above the die, compute at the cap) is a fault."""
    store = SqliteStore(tmp_path / "h100.db")
    processor = Processor(store, detectors(DetectorsConfig()))
    for _, f in recorded:
        processor.process([f])
    assert store.alerts(("pending", "firing", "resolved")) == []
    kinds = [e.kind for e in store.events(recorded[0][1].ts - 1, recorded[-1][1].ts + 1)]
    assert kinds.count("job_start") == 1 and "throttle" in kinds
    store.close()


def node_of(gpus: list[Frame], ts: float) -> Frame:
    """One 8-GPU node of one job, each GPU's readings taken from a real frame."""
    readings = tuple(dataclasses.replace(f.gpus[0], index=i, uuid=f"GPU-{i}", job="llm")
                     for i, f in enumerate(gpus))
    return dataclasses.replace(gpus[0], node="n1", ts=ts, gpus=readings)


def test_a_real_hung_kernel_among_computing_job_peers_is_stuck_not_a_straggler(
        recorded) -> None:
    """A hung kernel on a real H100 reads SM activity 6% (the SMs its blocks sit on), not
    0%; with no tensor or DRAM activity it is a hang, among peers at 96% a critical one."""
    gemm, spin = phase(recorded, "gemm"), phase(recorded, "spin")
    detector = JobPeers()
    found = []
    for k in range(20):
        found = detector.update([node_of([gemm[k]] * 7 + [spin[k]], 1000.0 + k)])
    assert [(f.rule, f.gpu, f.severity) for f in found] == [("gpu_stuck", 7, "critical")]
    assert ("a kernel resident (100% utilization) spinning on a few SMs (6% activity) with "
            "no tensor or memory work") in found[0].message
    # A rank waiting in a collective for its peers reads the same: judged after job_hang_s.
    assert found[0].for_s == DetectorsConfig().job_hang_s


def test_real_healthy_phases_and_a_whole_node_hung_are_not_gpu_stuck(recorded) -> None:
    """Eight GPUs in the same real phase: memory-bound, compute-bound, or all hung together
    (a whole job blocked is not one GPU stuck among working peers)."""
    for name in ("copy", "gemm", "spin", "idle"):
        frames = phase(recorded, name)
        detector = JobPeers()
        for k in range(20):
            found = detector.update([node_of([frames[k]] * 8, 1000.0 + k)])
            assert [f.rule for f in found] == [], (name, found)
    # Half hung, half copying: the copying peers work (DRAM 90%), the hung ones are stuck.
    copy, spin = phase(recorded, "copy"), phase(recorded, "spin")
    found = JobPeers().update([node_of([copy[0]] * 4 + [spin[0]] * 4, 1000.0)])
    assert sorted({f.rule for f in found}) == ["gpu_stuck"] and len(found) == 4
