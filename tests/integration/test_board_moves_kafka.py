"""Nodes back from a reboot with their GPUs numbered otherwise, through a real broker and a
real ``fleetwatch process``: the agent's frames come from its node source over the fake
NVML (the boards re-enumerated as a reboot gives them: one board not enumerated, or two
numbered the other way round with one board swapped), and the store is asked what it
holds: one critical ``gpu_missing`` alert naming the board gone, resolved when it is back;
moved boards as ``gpu_moved``, the one board swapped as the only ``gpu_replaced``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.collectors.node import node_source
from fleetwatch.collectors.nvml import FakeNvml
from fleetwatch.config import AgentConfig, Config, NodeConfig
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server

pytestmark = pytest.mark.kafka
ALL = ("pending", "firing", "resolved")


def booted(order: list[int], swapped: tuple[int, ...] = ()) -> FakeNvml:
    """Eight fake H100s as NVML enumerates them after a boot: the boards of ``order``
    (board k is the fake's GPU k: its UUID, serial, PCI bus id); ``swapped``: boards
    replaced by new ones (another UUID and serial, the same bus)."""
    nv = FakeNvml.of(8)
    for k in swapped:
        nv.gpus[k].uuid = nv.gpus[k].uuid[:-4] + "beef"
        nv.gpus[k].serial = f"99990000000{k:02d}"
    nv.gpus = [nv.gpus[k] for k in order]
    return nv


def send(producer: KafkaProducer, topic: str, node: str, nv: FakeNvml, start: float,
         count: int) -> None:
    """``count`` frames of ``node``'s agent over ``nv``, every 5 s from ``start``."""
    config = Config(node=NodeConfig("prod", "rack-02", node), agent=AgentConfig(kernel_log=""))
    source = node_source(config, nvml=nv)
    for k in range(count):
        for f in source.frames(start + 5.0 * k):
            producer.send(topic, encode(f), node.encode())
    producer.flush(30)
    source.close()


def wait(db: Path, proc: subprocess.Popen[bytes], log: Path, done: object) -> None:
    deadline = time.monotonic() + 90
    while True:
        store = SqliteStore(db)
        try:
            if done(store):  # type: ignore[operator]
                return
        finally:
            store.close()
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)


def missing(store: SqliteStore) -> list:
    return [a for a in store.alerts(ALL) if a.rule == "gpu_missing"]


def test_a_missing_board_is_alerted_and_renumbered_boards_are_moved(
        kafka: Server, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, group, db = f"frames-{run}", f"processors-{run}", tmp_path / "store.db"
    ensure_topic(kafka.address, topic, 2)
    SqliteStore(db).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": topic + ".dead",
                "FLEETWATCH_BUS_GROUP": group, "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                "FLEETWATCH_STORE_PATH": str(db), "FLEETWATCH_PROCESSOR_METRICS_PORT": "0"})
    log = tmp_path / "process.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    producer = KafkaProducer(kafka.address)
    t0 = time.time() - 900
    eight = list(range(8))
    try:
        for node in ("node-016", "node-009"):
            send(producer, topic, node, booted(eight), t0, 24)
        # Rebooted: node-016's board 2 does not enumerate; node-009's firmware upgrade
        # numbers boards 0 and 1 the other way round, and its board 3 was swapped.
        send(producer, topic, "node-016", booted([0, 1, 3, 4, 5, 6, 7]), t0 + 300, 24)
        send(producer, topic, "node-009", booted([1, 0, 2, 3, 4, 5, 6, 7], (3,)), t0 + 300, 24)
        wait(db, proc, log, lambda s: any(a.state == "firing" for a in missing(s)) and len(
            s.events(t0, t0 + 900, kinds=["gpu_moved"])) >= 7)
        # node-016 rebooted again with all eight boards.
        send(producer, topic, "node-016", booted(eight), t0 + 600, 12)
        wait(db, proc, log, lambda s: any(a.state == "resolved" for a in missing(s)))
    finally:
        producer.close()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, log.read_text()[-3000:]
    store = SqliteStore(db)
    [alert] = missing(store)
    nv = FakeNvml.of(8)
    assert (alert.node, alert.device, alert.severity) == ("node-016", "gpu2", "critical")
    assert (alert.uuid, alert.serial, alert.pci_bus_id) == (
        nv.gpus[2].uuid, nv.gpus[2].serial, nv.gpus[2].pci_bus_id)
    assert (alert.started_ts, alert.resolved_ts) == (t0 + 300, t0 + 600)
    assert [a for a in store.alerts(ALL) if a.rule == "gpu_lost"] == []
    events = store.events(t0, t0 + 900, kinds=["gpu_replaced", "gpu_moved"])
    by = sorted((e.node, e.kind, e.device, e.ts - t0) for e in events)
    assert by == sorted(
        [("node-009", "gpu_moved", "gpu0", 300.0), ("node-009", "gpu_moved", "gpu1", 300.0),
         ("node-009", "gpu_replaced", "gpu3", 300.0)]
        + [("node-016", "gpu_moved", f"gpu{i}", 300.0) for i in range(2, 7)]
        + [("node-016", "gpu_moved", f"gpu{i}", 600.0) for i in range(3, 8)])
    [gone] = [e for e in store.events(t0, t0 + 900, node="node-016", kinds=["gpu_state"])
              if e.value == "gone"]
    assert gone.device == "gpu7" and nv.gpus[2].serial in gone.text
    store.close()
