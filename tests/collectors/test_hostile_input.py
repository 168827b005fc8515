"""What users and broken machines feed the agent: each gets a clear error at start,
or a counted, logged drop while the agent keeps sampling."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetwatch.collectors.kmsg import KernelLog, KernelLogError
from fleetwatch.collectors.node import NodeSource, node_source
from fleetwatch.collectors.nvml import FakeNvml
from fleetwatch.collectors.spool import Spool
from fleetwatch.collectors.spooling import SpoolingProducer
from fleetwatch.collectors.xid_parse import parse_xid
from fleetwatch.config import AgentConfig, Config, ConfigError, NodeConfig, load
from tests.bus.test_spool import FakeBroker, recs
from tests.collectors.conftest import NodeTree

HUGE = "9" * 5000


def config(tree: NodeTree, kernel_log: str = "") -> Config:
    return Config(node=NodeConfig("dc1", "rack-07", "gpu-node-042"),
                  agent=AgentConfig(proc_root=str(tree.proc), sys_root=str(tree.sys),
                                    kernel_log=kernel_log))


def test_an_xid_of_thousands_of_digits_is_counted_and_the_others_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert parse_xid(f"NVRM: Xid (PCI:0000:18:00): {HUGE}, pid=1, x") is None
    path = tmp_path / "kern.log"
    path.write_text("")
    log = KernelLog(str(path))
    with path.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:18:00): 13, pid=1, a\n"
                f"NVRM: Xid (PCI:0000:18:00): {HUGE}, pid=2, b\n"
                "NVRM: Xid (PCI:0000:2a:00): 79, pid=3, c\n")
    assert [x.xid for x in log.poll()] == [13, 79]
    assert log.malformed == 1
    assert any("could not be read" in r.getMessage() for r in caplog.records)


def test_the_node_counts_malformed_and_unattributable_xids(
        tree: NodeTree, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "kern.log"
    path.write_text("")
    dropped: list[str] = []
    source = node_source(config(tree, str(path)), nvml=FakeNvml.of(2), on_dropped=dropped.append)
    with path.open("a") as f:
        f.write(f"NVRM: Xid (PCI:0000:18:00): {HUGE}, pid=2, b\n"
                "NVRM: Xid (PCI:0000:ff:00): 31, pid=1, MMU Fault\n"
                "NVRM: Xid (PCI:0000:ff:00): 31, pid=1, MMU Fault\n"
                "NVRM: Xid (PCI:0000:2a:00): 79, pid=3, fallen off the bus\n")
    [frame] = source.frames(time.time())
    assert frame.gpus[1].xids == (79,)
    assert sorted(dropped) == ["xid_malformed", "xid_unknown_pci", "xid_unknown_pci"]
    warnings = [r.getMessage() for r in caplog.records if "0000:ff:00" in r.getMessage()]
    assert len(warnings) == 1 and "none of this node's GPUs" in warnings[0]
    source.close()


def test_a_kernel_log_that_goes_away_is_counted_and_sampling_goes_on(
        tree: NodeTree, tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_text("")
    dropped: list[str] = []
    source = node_source(config(tree, str(path)), nvml=FakeNvml.of(1), on_dropped=dropped.append)
    assert source.kernel_log is not None
    os.close(source.kernel_log._fd)  # the descriptor fails under it, as a dead device would
    source.kernel_log._fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(3):
        [frame] = source.frames(time.time())
        assert frame.gpus[0].metrics["gpu_temp_c"] > 0
    assert dropped == ["kernel_log_unreadable"] * 3


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_kernel_log_that_is_no_log_is_refused_at_start(tree: NodeTree, tmp_path: Path,
                                                         kind: str) -> None:
    path = tmp_path / "log"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    with pytest.raises(KernelLogError, match=f"agent.kernel_log = '{path}' is"):
        KernelLog(str(path))
    with pytest.raises(ConfigError, match="kernel_log"):
        node_source(config(tree, str(path)), nvml=FakeNvml.of(1))


@pytest.mark.parametrize(("text", "key"), [("interval_s = inf", "agent.interval_s"),
                                           ("interval_s = 0.001", "agent.interval_s"),
                                           ("spool_max_mb = 0", "agent.spool_max_mb")])
def test_agent_numbers_out_of_range_are_refused(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "fw.toml"
    path.write_text(f"[agent]\n{text}\n")
    with pytest.raises(ConfigError, match=key):
        load(path, env={})


def test_interval_flag_goes_through_the_range_check(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fleetwatch.cli", "agent", "--interval", "0.001s",
         "--fake-gpus", "1"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "FLEETWATCH_AGENT_SPOOL_DIR": str(tmp_path)})
    assert result.returncode == 2, result.stderr
    assert "--interval" in result.stderr and "agent.interval_s" in result.stderr


def test_an_unwritable_spool_directory_is_refused_at_start() -> None:
    # /proc/self exists, and no one, root included, can create a file in it.
    with pytest.raises(OSError, match="cannot write a file in /proc/self"):
        Spool("/proc/self", 1 << 20)


def test_the_agent_refuses_an_unwritable_spool_directory_at_start() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fleetwatch.cli", "agent", "--fake-gpus", "1"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "FLEETWATCH_BUS_KIND": "kafka",
             "FLEETWATCH_BUS_BOOTSTRAP": "127.0.0.1:1", "FLEETWATCH_AGENT_SPOOL_DIR": "/proc/self"})
    assert result.returncode == 2, result.stderr
    assert "agent.spool_dir = '/proc/self' cannot be used" in result.stderr
    assert "cannot write a file in /proc/self" in result.stderr


def test_frames_the_spool_cannot_write_are_counted_as_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = FakeBroker()
    events: list[tuple[str, int]] = []
    p = SpoolingProducer(broker, tmp_path, 1 << 20, on_event=lambda n, k: events.append((n, k)),
                         retry_min_s=0.0, retry_max_s=0.0)

    def full(records: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    p.spool.append = full  # type: ignore[method-assign]
    broker.down = True
    for r in recs(0, 4):
        p.send(r.topic, r.value, r.key, r.headers)
        p.flush()
    assert p.dropped == 4 and p.write_errors >= 1
    assert sum(n for name, n in events if name == "dropped") == 4
    assert any(r.levelno == logging.ERROR and "they are lost" in r.getMessage()
               for r in caplog.records)


def test_without_a_bus_the_agent_serves_metrics_and_sends_nothing(tmp_path: Path) -> None:
    """bus.kind = "memory" (the default): a drop-in for dcgm-exporter, no Kafka needed."""
    import threading
    import urllib.request

    from fleetwatch.agent_service import AgentService
    from tests.servers import free_port

    port = free_port()
    cfg = Config(agent=AgentConfig(interval_s=0.1, metrics_port=port, kernel_log="",
                                   spool_dir=str(tmp_path / "spool")))
    service = AgentService(cfg, fake_gpus=2)
    assert service.producer is None and service.sender is None
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        # A tick that read both GPUs in time (on a loaded machine one may be late at a
        # tick, reported without values by design): waited for, not the first series.
        deadline = time.monotonic() + 30
        text = ""
        while text.count("DCGM_FI_DEV_GPU_TEMP{") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        assert text.count("DCGM_FI_DEV_GPU_TEMP{") == 2
        assert "fleetwatch_agent_spool_frames" not in text
    finally:
        stop.set()
        thread.join(10)
    assert not (tmp_path / "spool").exists()  # nothing spooled, nothing sent


def test_suppressed_driver_lines_are_counted_as_input_dropped(tree: NodeTree,
                                                            tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_text("")
    dropped: list[str] = []
    source = NodeSource(config(tree, str(path)), lambda: FakeNvml.of(1), KernelLog(str(path)),
                        on_dropped=dropped.append)
    with path.open("a") as f:
        f.write("[Sun Feb 23 16:25:00 2025] krcReportXid: 12 callbacks suppressed\n")
    source.frames(time.time())
    source.frames(time.time())
    assert dropped == ["xid_suppressed"] * 12
    source.close()
