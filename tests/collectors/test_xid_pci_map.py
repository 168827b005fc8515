"""Kernel-log XIDs follow the GPUs as NVML has them now: re-attached, appeared, re-enumerated."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pynvml
import pytest

from fleetwatch.collectors.kmsg import KernelLog
from fleetwatch.collectors.node import NodeSource
from fleetwatch.collectors.nvml import FakeNvml
from fleetwatch.config import AgentConfig, Config, NodeConfig
from fleetwatch.frame import Frame
from tests.collectors.conftest import Clock, NodeTree

SLOW_EVERY = 12  # NvmlReader's default: the re-probe runs every 12 ticks


def config(tree: NodeTree, kernel_log: Path) -> Config:
    return Config(node=NodeConfig("dc1", "rack-07", "gpu-node-042"),
                  agent=AgentConfig(nvml_policy="retry", proc_root=str(tree.proc),
                                    sys_root=str(tree.sys), kernel_log=str(kernel_log)))


def ticks(source: NodeSource, clock: Clock, n: int) -> Frame:
    frame = None
    for _ in range(n):
        clock.advance(5)
        [frame] = source.frames(time.time())
    assert frame is not None
    return frame


def test_xids_of_a_gpu_re_attached_by_the_reprobe_are_attributed(
        tree: NodeTree, clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    nv = FakeNvml.of(4)  # GPU 2 at 0000:3a:00
    nv.gpus[2].open_error = pynvml.NVMLError_Unknown()  # cannot be opened at agent start
    dropped: list[str] = []
    source = NodeSource(config(tree, kern), lambda: nv, KernelLog(str(kern)),
                        on_dropped=dropped.append, clock=clock)
    [frame] = source.frames(time.time())
    assert frame.gpus[2].state == "lost"
    nv.restore(2)
    frame = ticks(source, clock, SLOW_EVERY + 1)
    assert frame.gpus[2].state == "ok" and frame.gpus[2].info["pci_bus_id"] == "00000000:3A:00.0"
    with kern.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:3a:00): 48, pid=1, name=x, DBE\n"
                "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, "
                "GPU has fallen off the bus.\n")
    frame = ticks(source, clock, 1)
    assert frame.gpus[2].xids == (48, 79)
    assert frame.gpus[2].state == "lost"  # XID 79 in the kernel log: lost now
    assert [g.xids for g in frame.gpus if g.index != 2] == [(), (), ()]
    assert dropped == []
    assert not any("not attributed" in r.getMessage() for r in caplog.records)
    source.close()


def test_a_gpu_that_appeared_after_start_gets_its_xids(tree: NodeTree, clock: Clock,
                                                       tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    nv = FakeNvml.of(4)
    fourth = nv.gpus.pop()  # GPU 3 (0000:5d:00) not there at start
    source = NodeSource(config(tree, kern), lambda: nv, KernelLog(str(kern)), clock=clock)
    source.frames(time.time())
    nv.gpus.append(fourth)
    frame = ticks(source, clock, SLOW_EVERY + 1)
    assert len(frame.gpus) == 4 and frame.gpus[3].state == "ok"
    with kern.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:5d:00): 31, pid=1, name=x, MMU Fault\n")
    frame = ticks(source, clock, 1)
    assert [g.xids for g in frame.gpus] == [(), (), (), (31,)]
    source.close()


def test_gpus_re_enumerated_in_another_order_get_their_own_xids(tree: NodeTree, clock: Clock,
                                                                tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    nv = FakeNvml.of(4)  # GPU 2 at 0000:3a:00, GPU 3 at 0000:5d:00
    source = NodeSource(config(tree, kern), lambda: nv, KernelLog(str(kern)), clock=clock)
    source.frames(time.time())
    nv.lose(2)
    nv.lose(3)
    ticks(source, clock, 1)
    nv.gpus[2], nv.gpus[3] = nv.gpus[3], nv.gpus[2]  # back from the reset, swapped
    nv.restore(2)
    nv.restore(3)
    frame = ticks(source, clock, SLOW_EVERY)
    assert [(g.index, g.info["pci_bus_id"], g.state) for g in frame.gpus[2:]] == [
        (2, "00000000:5D:00.0", "ok"), (3, "00000000:3A:00.0", "ok")]
    with kern.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:5d:00): 48, pid=1, name=x, DBE\n")
    frame = ticks(source, clock, 1)
    assert [(g.index, g.xids) for g in frame.gpus if g.xids] == [(2, (48,))]
    source.close()


def test_a_lost_gpu_whose_address_another_gpu_took_gets_no_xids(tree: NodeTree, clock: Clock,
                                                                  tmp_path: Path) -> None:
    """GPU 3 still lost (its last known address 5d:00), GPU 2 re-attached at 5d:00: the GPU
    that answers now holds the address, never the stale one."""
    kern = tmp_path / "kern.log"
    kern.write_text("")
    nv = FakeNvml.of(4)
    source = NodeSource(config(tree, kern), lambda: nv, KernelLog(str(kern)), clock=clock)
    source.frames(time.time())
    nv.lose(2)
    nv.lose(3)
    ticks(source, clock, 1)
    nv.gpus[2], nv.gpus[3] = nv.gpus[3], nv.gpus[2]
    nv.restore(2)  # index 2 answers (the board at 5d:00); index 3 stays lost
    frame = ticks(source, clock, SLOW_EVERY)
    assert frame.gpus[3].state == "lost" and frame.gpus[3].info["pci_bus_id"] == "00000000:5D:00.0"
    assert frame.gpus[2].state == "ok" and frame.gpus[2].info["pci_bus_id"] == "00000000:5D:00.0"
    with kern.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:5d:00): 48, pid=1, name=x, DBE\n")
    frame = ticks(source, clock, 1)
    assert [(g.index, g.xids) for g in frame.gpus if g.xids] == [(2, (48,))]
    source.close()


def test_a_lost_gpu_keeps_its_address_for_the_kernel_log(tree: NodeTree, clock: Clock,
                                                         tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    nv = FakeNvml.of(4)
    source = NodeSource(config(tree, kern), lambda: nv, KernelLog(str(kern)), clock=clock)
    source.frames(time.time())
    nv.lose(1)
    ticks(source, clock, 1)
    with kern.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:2a:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    frame = ticks(source, clock, 1)
    assert frame.gpus[1].state == "lost" and frame.gpus[1].xids == (79,)
    source.close()


def test_an_address_unknown_even_now_is_counted_and_named(
        tree: NodeTree, clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    kern = tmp_path / "kern.log"
    kern.write_text("")
    nv = FakeNvml.of(2)
    dropped: list[str] = []
    source = NodeSource(config(tree, kern), lambda: nv, KernelLog(str(kern)),
                        on_dropped=dropped.append, clock=clock)
    source.frames(time.time())
    with kern.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:ff:00): 31, pid=1, name=x, MMU Fault\n")
    frame = ticks(source, clock, 1)
    assert [g.xids for g in frame.gpus] == [(), ()]
    assert dropped == ["xid_unknown_pci"]
    [msg] = [r.getMessage() for r in caplog.records if "not attributed" in r.getMessage()]
    assert "XID 31 on PCI 0000:ff:00" in msg and "(0000:18:00, 0000:2a:00)" in msg
    source.close()


def test_a_mig_xid_in_the_kernel_log_reaches_its_gpu(tree: NodeTree, clock: Clock,
                                                     tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    nv = FakeNvml.of(2)
    dropped: list[str] = []
    source = NodeSource(config(tree, kern), lambda: nv, KernelLog(str(kern)),
                        on_dropped=dropped.append, clock=clock)
    source.frames(time.time())
    with kern.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:2a:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel "
                "(0x9). RST: No, D-RST: No\n")
    frame = ticks(source, clock, 1)
    assert [g.xids for g in frame.gpus] == [(), (94,)] and dropped == []
    source.close()


class UnplacedEvents(FakeNvml):
    """NVML delivers an XID event whose device handle the backend cannot name (index -1)."""

    def xid_events_drain(self, limit: int) -> list[tuple[int, int]]:
        return [(-1, 48), *super().xid_events_drain(limit)]


def test_an_nvml_xid_event_of_no_known_gpu_reaches_the_dropped_count(
        tree: NodeTree, clock: Clock, tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    nv = UnplacedEvents(FakeNvml.of(2).gpus)
    dropped: list[str] = []
    source = NodeSource(config(tree, kern), lambda: nv, KernelLog(str(kern)),
                        on_dropped=dropped.append, clock=clock)
    [frame] = source.frames(time.time())
    assert [g.xids for g in frame.gpus] == [(), ()]
    assert dropped == ["xid_unknown_gpu"]
    source.close()
