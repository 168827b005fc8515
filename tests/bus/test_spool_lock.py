"""One agent per spool directory, and a spool that loses a segment file under it.

Two agents on one ``agent.spool_dir`` (an upgrade starting the new unit before the
old one stops; a DaemonSet beside a systemd unit) appended to the same segment and
deleted each other's files when the broker came back: frames were lost, uncounted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from fleetwatch.collectors.spool import Spool, SpoolBusy, SpoolRecord
from fleetwatch.collectors.spooling import SpoolingProducer
from fleetwatch.pipeline.bus import BusError
from tests.servers import free_port


def recs(start: int, n: int) -> list[SpoolRecord]:
    return [SpoolRecord("t", str(i).encode()) for i in range(start, start + n)]


class FlakyBroker:
    """A producer that refuses everything while ``down``, and records what it took."""

    def __init__(self) -> None:
        self.down = True
        self.got: list[bytes] = []
        self._pending: list[bytes] = []

    def send(self, topic: str, value: bytes, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = ()) -> None:
        if self.down:
            raise BusError("broker down")
        self._pending.append(value)

    def flush(self, timeout_s: float | None = None) -> None:
        if self.down:
            self._pending.clear()
            raise BusError("broker down")
        self.got += self._pending
        self._pending.clear()

    def close(self) -> None:
        pass


def test_a_second_spool_on_the_same_directory_is_refused_naming_the_pid(
        tmp_path: Path) -> None:
    first = Spool(tmp_path, 1 << 20)
    with pytest.raises(SpoolBusy) as refused:
        Spool(tmp_path, 1 << 20)
    message = str(refused.value)
    assert f"pid {os.getpid()}" in message and str(tmp_path) in message
    first.append(recs(0, 3))
    first.close()  # the lock goes with it
    again = Spool(tmp_path, 1 << 20)
    assert len(again) == 3
    again.close()


def test_the_lock_is_held_across_processes(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from fleetwatch.collectors.spool import Spool\n"
         f"s = Spool({str(tmp_path)!r}, 1 << 20)\nprint('ready', flush=True)\n"
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(SpoolBusy, match=f"pid {holder.pid}"):
            Spool(tmp_path, 1 << 20)
    finally:
        holder.communicate("", timeout=10)
    # The holder is gone (however it ended): the kernel dropped its lock.
    Spool(tmp_path, 1 << 20).close()


def test_a_segment_vanishing_under_the_producer_is_counted_not_fatal(tmp_path: Path) -> None:
    broker = FlakyBroker()
    events: list[tuple[str, int]] = []
    p = SpoolingProducer(broker, tmp_path, 1 << 20, on_event=lambda n, k: events.append((n, k)),
                         retry_max_s=0)
    for i in range(5):
        p.send("t", str(i).encode())
    p.flush()
    assert p.backlog == 5
    for seg in tmp_path.glob("*.seg"):
        seg.unlink()  # what another process, or an admin's rm, does
    broker.down = False
    p.flush()  # raised FileNotFoundError, and did so on every later try
    assert p.dropped == 5 and ("dropped", 5) in events
    assert p.backlog == 0
    p.send("t", b"after")
    p.flush()
    assert broker.got == [b"after"]
    p.close()


def test_a_second_agent_on_the_same_spool_stops_naming_the_first(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    env = {**os.environ, "FLEETWATCH_BUS_KIND": "kafka",
           "FLEETWATCH_BUS_BOOTSTRAP": f"127.0.0.1:{free_port()}",  # nothing listens
           "FLEETWATCH_AGENT_SPOOL_DIR": str(spool)}
    cmd = [sys.executable, "-m", "fleetwatch.cli", "agent", "--fake-gpus", "1"]
    first = subprocess.Popen(cmd, env={**env, "FLEETWATCH_AGENT_METRICS_PORT": str(free_port())},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (spool / "lock").exists() or not (spool / "lock").read_text().strip():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        second = subprocess.run(
            cmd, env={**env, "FLEETWATCH_AGENT_METRICS_PORT": str(free_port())},
            capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr
        assert f"pid {first.pid}" in second.stderr
        assert "agent.spool_dir" in second.stderr and "Traceback" not in second.stderr
        assert first.poll() is None  # the first one goes on
    finally:
        first.terminate()
        first.communicate(timeout=30)


def test_the_holder_is_named_as_this_pid_namespace_sees_it() -> None:
    from fleetwatch.storelock import holder

    ns = "pid:[4026531836]"
    assert holder(f"4242 node-7 {ns}", "node-7", ns) == (
        "pid 4242", "stop it first (Ctrl-C, or kill 4242)")
    who, stop = holder("1 pod-abc pid:[4026532999]", "node-7", ns)   # a container's agent
    assert who.startswith("pid 1 in its own PID namespace on host pod-abc")
    assert "kill" not in stop and "not by that pid here" in stop
    who, stop = holder("4242", "node-7", ns)                           # an older release's
    assert who == "pid 4242" and "kill 4242" not in stop
    assert holder("", "node-7", ns) == ("pid unknown", "stop it first")


@pytest.mark.skipif(subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                                   capture_output=True).returncode != 0,
                    reason="cannot make a PID namespace here (unshare --pid needs root)")
def test_an_agent_in_a_container_is_not_named_by_its_pid_one(tmp_path: Path) -> None:
    """The DaemonSet's agent is pid 1 of its PID namespace; a host agent on the same spool
    must not be told to `kill 1` (init, on the host), nor that it is a configuration error."""
    spool = tmp_path / "spool"
    env = {**os.environ, "FLEETWATCH_BUS_KIND": "kafka",
           "FLEETWATCH_BUS_BOOTSTRAP": f"127.0.0.1:{free_port()}",  # nothing listens
           "FLEETWATCH_AGENT_SPOOL_DIR": str(spool)}
    cmd = [sys.executable, "-m", "fleetwatch.cli", "agent", "--fake-gpus", "1"]
    pod = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *cmd],
                           env={**env, "FLEETWATCH_AGENT_METRICS_PORT": str(free_port())},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (spool / "lock").exists() or not (spool / "lock").read_text().strip():
            assert pod.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        assert (spool / "lock").read_text().split()[0] == "1"
        host = subprocess.run(cmd, env={**env,
                                        "FLEETWATCH_AGENT_METRICS_PORT": str(free_port())},
                              capture_output=True, text=True, timeout=60)
        assert host.returncode == 2, host.stderr
        assert "pid 1 in its own PID namespace" in host.stderr
        assert "kill" not in host.stderr and "configuration error" not in host.stderr
        assert "agent.spool_dir" in host.stderr
    finally:
        # unshare waits for its child and does not pass SIGTERM on: the agent is stopped.
        children = Path(f"/proc/{pod.pid}/task/{pod.pid}/children")
        for child in (children.read_text().split() if children.exists() else []):
            os.kill(int(child), signal.SIGTERM)
        pod.wait(30)
