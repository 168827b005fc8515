"""NVML's whole lifecycle on FakeNvml: GPUs opened one by one, re-probed, lost at XID 79,
MIG changes, the driver going away and coming back, NVLink unknown, XID registration."""

from __future__ import annotations

import time

import pynvml
import pytest

from fleetwatch.collectors.kmsg import KernelLog
from fleetwatch.collectors.node import NVML_REINIT_S, NodeSource
from fleetwatch.collectors.nvml import FakeNvml, NvmlDriverGone, NvmlReader
from tests.collectors.conftest import Clock, NodeTree
from tests.collectors.test_node import config

States = list[tuple[int, str, str]]


def reader_of(nv: FakeNvml, states: States | None = None, slow_every: int = 3) -> NvmlReader:
    def on_state(index: int, uuid: str, state: str, why: str) -> None:
        if states is not None:
            states.append((index, state, why))

    return NvmlReader.open(nv, slow_every=slow_every, on_state=on_state)


def test_one_gpu_that_cannot_be_opened_leaves_the_others_reporting() -> None:
    nv = FakeNvml.of(4)
    nv.gpus[2].open_error = pynvml.NVMLError_GpuIsLost()
    states: States = []
    gpus = reader_of(nv, states).read().gpus
    assert [g.state for g in gpus] == ["ok", "ok", "lost", "ok"]
    assert all(g.metrics["gpu_temp_c"] == 61 for g in gpus if g.state == "ok")
    assert states == [(2, "lost", "cannot be opened: GPU is lost")]


def test_a_lost_gpu_is_probed_again_and_comes_back_after_a_reset() -> None:
    nv = FakeNvml.of(2)
    states: States = []
    reader = reader_of(nv, states, slow_every=3)
    nv.lose(1)
    assert reader.read().gpus[1].state == "lost"
    nv.restore(1)  # nvidia-smi -r, or the GPU re-attached
    seen = [reader.read().gpus[1].state for _ in range(3)]
    assert seen[-1] == "ok" and "lost" in seen  # on the slow cadence, not every tick
    assert reader.read().gpus[1].metrics["gpu_temp_c"] == 61
    assert [(i, s) for i, s, _ in states] == [(1, "lost"), (1, "ok")]


def test_a_gpu_that_appears_later_is_seen() -> None:
    nv = FakeNvml.of(2)
    states: States = []
    reader = reader_of(nv, states, slow_every=2)
    assert len(reader.read().gpus) == 2
    nv.gpus.append(FakeNvml.of(3).gpus[2])
    counts = [len(reader.read().gpus) for _ in range(2)]
    assert counts[-1] == 3 and reader.read().gpus[2].metrics["gpu_temp_c"] == 61
    assert states == [(2, "ok", "appeared")]


def test_xid_79_from_nvml_marks_the_gpu_lost_at_once() -> None:
    nv = FakeNvml.of(2)
    reader = reader_of(nv)
    nv.inject_xid(1, 79)  # the GPU still answers calls this tick; the driver said it is gone
    g = reader.read().gpus[1]
    assert g.state == "lost" and g.xids == (79,) and g.metrics == {}


def test_xid_79_from_the_kernel_log_marks_the_gpu_lost_at_once(tree: NodeTree, clock: Clock,
                                                                 tmp_path) -> None:
    nv = FakeNvml.of(2)
    path = tmp_path / "kern.log"
    path.write_text("")
    source = NodeSource(config(tree), lambda: nv, KernelLog(str(path)), clock=clock)
    with path.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:2a:00): 79, pid=0, GPU has fallen off the bus.\n")
    [frame] = source.frames(time.time())
    assert frame.gpus[1].state == "lost" and frame.gpus[1].xids == (79,)
    assert frame.gpus[1].metrics == {} and frame.gpus[0].state == "ok"
    [frame] = source.frames(time.time())
    assert frame.gpus[1].state == "lost"  # and it stays so until a re-probe says otherwise
    source.close()


def test_not_supported_is_asked_again_when_mig_mode_changes() -> None:
    nv = FakeNvml.of(1)
    nv.fail(0, "utilization", pynvml.NVMLError_NotSupported())  # as under MIG
    nv.set(0, "mig_mode", 1)
    reader = reader_of(nv, slow_every=2)
    assert "gpu_util_pct" not in reader.read().gpus[0].metrics
    nv.set(0, "utilization", (55, 20))  # MIG disabled: utilization is supported again
    nv.set(0, "mig_mode", 0)
    reader.read()
    g = reader.read().gpus[0]
    assert g.info["mig_mode"] == "disabled" and g.metrics["gpu_util_pct"] == 55


def test_nvlink_state_failure_is_unknown_not_zero_links_down() -> None:
    nv = FakeNvml.of(1)
    nv.set(0, "nvlink_active", {4: pynvml.NVMLError_Unknown()})
    m = reader_of(nv).read().gpus[0].metrics
    assert "gpu_nvlink_links_down" not in m


def test_xid_registration_refused_by_one_gpu_keeps_events_for_the_others() -> None:
    nv = FakeNvml.of(3)
    nv.set(0, "register_events", pynvml.NVMLError_Unknown())
    reader = reader_of(nv)
    nv.inject_xid(2, 13)
    assert reader.read().gpus[2].xids == (13,)


def test_driver_gone_mid_run_stops_stale_values_and_reinitialises(
        tree: NodeTree, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    nv = FakeNvml.of(2)
    source = NodeSource(config(tree), lambda: nv, None, clock=clock)
    assert len(source.frames(time.time())[0].gpus) == 2
    nv.unload_driver()
    with pytest.raises(NvmlDriverGone):
        NvmlReader(nv).read()  # the reader's own answer, for a caller without NodeSource
    for _ in range(3):
        clock.advance(1)
        [frame] = source.frames(time.time())
        assert frame.gpus == ()  # nothing stale passed off as fresh
        assert "host_mem_total_bytes" in frame.host.metrics  # the host goes on
    assert nv.inits == nv.shutdowns == 1  # the first init's shutdown, once
    gone = [r for r in caplog.records if "Uninitialized" in r.getMessage()]
    assert len(gone) == 1
    nv.load_driver()
    clock.advance(NVML_REINIT_S)
    [frame] = source.frames(time.time())
    assert [g.state for g in frame.gpus] == ["ok", "ok"]
    assert frame.gpus[0].metrics["gpu_temp_c"] == 61
    source.close()
    assert nv.inits == nv.shutdowns == 2


def test_every_successful_init_gets_its_shutdown(tree: NodeTree, clock: Clock) -> None:
    nv = FakeNvml.of(1)
    nv.device_count = lambda: (_ for _ in ()).throw(pynvml.NVMLError_Unknown())  # type: ignore[method-assign]
    with pytest.raises(Exception, match="listing the GPUs"):
        NvmlReader.open(nv)
    assert nv.inits == nv.shutdowns == 1


def test_mig_instances_are_reported_per_instance_with_dcgm_exporter_labels(
        tree: NodeTree, clock: Clock) -> None:
    from fleetwatch.collectors.exporter import Exporter, render

    nv = FakeNvml.of(2)
    nv.enable_mig(0, [(1, "3g.40gb", 40 * 2**30), (2, "1g.10gb", 10 * 2**30)])
    source = NodeSource(config(tree), lambda: nv, None, clock=clock)
    [frame] = source.frames(time.time())
    assert frame.gpus[0].info["mig_mode"] == "enabled"
    assert "gpu_util_pct" not in frame.gpus[0].metrics  # NVML: per instance only under MIG
    assert [i.profile for i in source.mig[0]] == ["3g.40gb", "1g.10gb"] and 1 not in source.mig
    e = Exporter(hostname="n")
    e.update(frame, source.mig)
    lines = [line for line in render(e.collect()).decode().splitlines()
             if line.startswith("DCGM_FI_DEV_FB_TOTAL{")]
    mig = [line for line in lines if "GPU_I_ID" in line]
    assert len(lines) == 4 and len(mig) == 2
    assert 'GPU_I_PROFILE="1g.10gb",GPU_I_ID="2"' in mig[1] and mig[1].endswith(" 10240.0")
    assert 'gpu="0"' in mig[1]
    source.close()


def test_gpu_state_changes_reach_the_node_callback(tree: NodeTree, clock: Clock) -> None:
    from fleetwatch.collectors.node import node_source

    nv = FakeNvml.of(2)
    states: list[str] = []
    source = node_source(config(tree), nvml=nv, clock=clock, on_gpu_state=states.append)
    nv.inject_xid(0, 79)
    source.frames(time.time())
    assert states == ["lost"]
    source.close()
