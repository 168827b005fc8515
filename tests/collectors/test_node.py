"""The node source: composition, the missing-NVML policy, XID merging, jobs, the codec."""

from __future__ import annotations

import logging
import time

import pytest

from fleetwatch import codec
from fleetwatch.collectors.kmsg import KernelLog
from fleetwatch.collectors.node import NVML_RETRY_S, NodeSource, node_source
from fleetwatch.collectors.nvml import FakeNvml, NvmlUnavailable
from fleetwatch.config import AgentConfig, Config, NodeConfig
from tests.collectors.conftest import FIXTURES, Clock, NodeTree


def config(tree: NodeTree, policy: str = "retry") -> Config:
    return Config(node=NodeConfig("dc1", "rack-07", "gpu-node-042"),
                  agent=AgentConfig(nvml_policy=policy, proc_root=str(tree.proc),  # type: ignore[arg-type]
                                    sys_root=str(tree.sys), kernel_log=""))


def test_frame_round_trips_through_the_codec(tree: NodeTree, clock: Clock) -> None:
    nv = FakeNvml.of(8)
    nv.gpus[0].pids = [1001]
    nv.lose(5)
    source = node_source(config(tree), nvml=nv, clock=clock)
    [first] = source.frames(time.time())
    tree.advance()
    clock.advance(5)
    nv.inject_xid(3, 79)
    [frame] = source.frames(time.time())
    assert (frame.cluster, frame.rack, frame.node, frame.seq) == ("dc1", "rack-07",
                                                                  "gpu-node-042", first.seq + 1)
    assert len(frame.gpus) == 8 and frame.gpus[5].state == "lost"
    assert frame.gpus[0].job == "12345" and frame.gpus[3].xids == (79,)
    assert "host_cpu_power_w" in frame.host.metrics and "host_cpu_util_pct" in frame.host.metrics
    assert {p.kind for p in frame.host.ports} == {"nic", "ib"}
    assert codec.decode(codec.encode(frame)) == frame
    source.close()


def test_fake_gpus_mode(tree: NodeTree) -> None:
    source = node_source(config(tree), fake_gpus=3)
    [frame] = source.frames(time.time())
    assert [g.index for g in frame.gpus] == [0, 1, 2]
    assert source.kernel_log is None and source.driver_version == "580.105.08"


@pytest.mark.parametrize("nv", [FakeNvml.missing(), FakeNvml.mismatch()],
                         ids=["missing", "mismatch"])
@pytest.mark.parametrize("policy", ["ignore", "retry"])
def test_without_nvml_runs_host_only_with_one_log_line(
        tree: NodeTree, clock: Clock, nv: FakeNvml, policy: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    source = node_source(config(tree, policy), nvml=nv, clock=clock)
    for _ in range(5):
        clock.advance(NVML_RETRY_S)
        [frame] = source.frames(time.time())
        assert frame.gpus == () and "host_mem_total_bytes" in frame.host.metrics
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "Running host-only" in lines[0] and "HINT:" in lines[0]
    assert ("install the NVIDIA driver" in lines[0]) or ("reboot" in lines[0])


def test_error_policy_raises(tree: NodeTree) -> None:
    with pytest.raises(NvmlUnavailable, match="libnvidia-ml.so.1"):
        node_source(config(tree, "error"), nvml=FakeNvml.missing())


def test_retry_policy_picks_nvml_up_once_it_works(tree: NodeTree, clock: Clock) -> None:
    attempts: list[FakeNvml] = []

    def backend() -> FakeNvml:
        nv = FakeNvml.missing() if len(attempts) < 2 else FakeNvml.of(2)
        attempts.append(nv)
        return nv

    source = NodeSource(config(tree, "retry"), backend, None, clock=clock)
    assert source.frames(time.time())[0].gpus == ()
    clock.advance(10)
    assert source.frames(time.time())[0].gpus == () and len(attempts) == 1  # not yet
    clock.advance(NVML_RETRY_S)
    assert source.frames(time.time())[0].gpus == () and len(attempts) == 2
    clock.advance(NVML_RETRY_S)
    assert len(source.frames(time.time())[0].gpus) == 2
    assert source.nvml_problem is None


def test_kernel_log_xids_fill_what_nvml_missed_without_duplicates(tree: NodeTree,
                                                                  clock: Clock) -> None:
    nv = FakeNvml.of(2)  # GPU 0 at 0000:18:00, GPU 1 at 0000:2a:00
    log = KernelLog(str(FIXTURES / "kmsg.txt"), from_start=True)
    source = NodeSource(config(tree), lambda: nv, log, clock=clock)
    nv.inject_xid(1, 79)  # NVML saw the 79 too; the kernel log alone saw the 13
    [frame] = source.frames(time.time())
    assert frame.gpus[0].xids == (13,)
    assert frame.gpus[1].xids == (79,)  # once, not twice; the unknown PCI address is dropped
    source.close()


def test_nvml_errors_reach_the_callback(tree: NodeTree) -> None:
    import pynvml

    nv = FakeNvml.of(1)
    kinds: list[str] = []
    source = node_source(config(tree), nvml=nv, on_nvml_error=kinds.append)
    nv.fail(0, "utilization", pynvml.NVMLError_Timeout())
    source.frames(time.time())
    assert kinds == ["timeout"]


def test_every_scenario_gives_a_valid_frame(tree: NodeTree, clock: Clock,
                                            scenario: tuple[str, FakeNvml]) -> None:
    name, nv = scenario
    source = node_source(config(tree), nvml=nv, clock=clock)
    for _ in range(3):
        clock.advance(5)
        [frame] = source.frames(time.time())
        assert codec.decode(codec.encode(frame)) == frame
    expected = 0 if name in ("nvml_missing", "driver_mismatch") else 4
    assert len(frame.gpus) == expected
    assert [g.index for g in frame.gpus if g.state == "lost"] == ([2] if name == "gpu_lost" else [])
    if name == "not_supported":
        for metric in ("gpu_power_w", "gpu_temp_c", "gpu_util_pct", "gpu_fb_used_bytes"):
            assert metric not in frame.gpus[1].metrics and metric in frame.gpus[0].metrics
    if name == "flaky":
        assert "gpu_util_pct" not in frame.gpus[0].metrics
        assert "gpu_ecc_dbe_volatile_total" not in frame.gpus[3].metrics
        assert frame.gpus[3].metrics["gpu_power_w"] > 0 and frame.gpus[3].state == "ok"
    source.close()


def test_frame_identity_is_unique_across_agent_restarts(tree: NodeTree) -> None:
    """(node, seq) names one frame: a restarted agent does not start again at 1."""
    seen: list[int] = []
    for _restart in range(3):
        source = node_source(config(tree), fake_gpus=1)
        seen += [source.frames(time.time())[0].seq for _ in range(5)]
        source.close()
        time.sleep(0.01)  # the restart itself takes longer than this
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen


def test_one_sm_fault_of_16_kernel_lines_is_one_xid_with_its_nvml_twin(
        tree: NodeTree, clock: Clock, real_data, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    from fleetwatch.collectors.exporter import Exporter
    from tests.collectors.test_exporter import scrape

    nv = FakeNvml.of(4)
    nv.gpus[2].pci_bus_id = "00000000:38:00.0"  # the real log's GPU
    kern = tmp_path / "kern.log"
    kern.write_text("")
    source = NodeSource(config(tree), lambda: nv, KernelLog(str(kern)), clock=clock)
    exporter = Exporter()
    text = (real_data / "failure_logs" / "gpud_dmesg_xid13_xid43_plus_oom.log").read_text()
    nv.inject_xid(2, 13)  # NVML's one event for the fault
    kern.write_text("".join(line + "\n" for line in text.splitlines() if ": 13," in line))
    caplog.set_level(logging.INFO)
    [frame] = source.frames(time.time())
    exporter.update(frame)
    assert frame.gpus[2].xids == (13,)
    assert any("printed as 16 kernel-log lines" in r.getMessage() for r in caplog.records)
    clock.advance(5)
    [frame] = source.frames(time.time())
    exporter.update(frame)
    assert all(not g.xids for g in frame.gpus)
    counts = {(s.labels["gpu"], s.labels["xid"]): s.value
              for s in scrape(exporter)["fleetwatch_gpu_xid"].samples}  # type: ignore[attr-defined]
    assert counts == {("2", "13"): 1.0}
    source.close()
