"""``fleetwatch process --workers N``: N group members as child processes, supervised.

Against the real broker: two workers store every frame once; a worker killed
with SIGKILL is restarted by the supervisor and the group goes on; SIGTERM
to the supervisor stops every worker and exits 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from fleetwatch.cli import main
from fleetwatch.codec import encode
from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.config import ConfigError, load
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from fleetwatch.pipeline.points import PointMaker
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.process_service import _worker_config
from tests.servers import Server
from tests.store.helpers import stored

NODES = 20


def test_workers_default_to_one_and_must_be_positive() -> None:
    assert load(None, {}).processor.workers == 1
    assert load(None, {"FLEETWATCH_PROCESSOR_WORKERS": "4"}).processor.workers == 4
    with pytest.raises(ConfigError, match="processor.workers"):
        load(None, {"FLEETWATCH_PROCESSOR_WORKERS": "0"})
    with pytest.raises(SystemExit):
        main(["process", "--workers", "0"])


def test_each_worker_is_one_member_with_its_own_metrics_port() -> None:
    config = load(None, {"FLEETWATCH_PROCESSOR_WORKERS": "3"})
    ports = [_worker_config(config, i).processor for i in range(3)]
    assert [(p.workers, p.metrics_port) for p in ports] == [(1, 9401), (1, 9402), (1, 9403)]
    off = load(None, {"FLEETWATCH_PROCESSOR_WORKERS": "3",
                      "FLEETWATCH_PROCESSOR_METRICS_PORT": "0"})
    assert _worker_config(off, 2).processor.metrics_port == 0


def produce(kafka: Server, topic: str, sim: FleetSim, ticks: int) -> int:
    """Publish ``ticks`` ticks of the fleet; return how many samples the store must gain."""
    maker, total = PointMaker(), 0
    p = KafkaProducer(kafka.address, linger_ms=5)
    for _ in range(ticks):
        sim.step()
        frames = sim.frames()
        for f in frames:
            p.send(topic, encode(f), key=f.node.encode())
        total += sum(1 for _ in maker.points(frames))
    p.flush(30)
    p.close()
    return total


def wait_stored(db: Path, total: int, supervisor: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while (n := stored(db)) < total:
        assert supervisor.poll() is None, "the supervisor exited:\n" + log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{n} of {total} stored:\n" + log.read_text()[-3000:]
        time.sleep(0.2)
    assert stored(db) == total  # each sample once, replays included


def workers(supervisor: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The worker processes (not multiprocessing's resource tracker)."""
    out = []
    for child in psutil.Process(supervisor.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if "spawn_main" in " ".join(child.cmdline()):
                out.append(child)
    return out


@pytest.mark.kafka
def test_supervisor_restarts_a_killed_worker_and_stops_all_on_sigterm(
        kafka: Server, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, group = f"frames-{run}", f"workers-{run}"
    ensure_topic(kafka.address, topic, 4)
    db = tmp_path / "store.db"
    SqliteStore(db).close()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env = {**clean, "FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
           "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": f"{topic}.dead",
           "FLEETWATCH_BUS_GROUP": group, "FLEETWATCH_STORE_KIND": "sqlite",
           "FLEETWATCH_STORE_PATH": str(db), "FLEETWATCH_PROCESSOR_METRICS_PORT": "0"}
    log = tmp_path / "process.log"
    with open(log, "wb") as out:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "fleetwatch.cli", "process", "--workers", "2"],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    sim = FleetSim(SimParams(nodes=NODES, gpus=1, interval_s=15.0, seed=7),
                   start_ts=time.time() - 6 * 3600)
    try:
        total = produce(kafka, topic, sim, 50)
        wait_stored(db, total, supervisor, log)
        first = workers(supervisor)
        assert len(first) == 2, log.read_text()[-3000:]

        first[0].send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 30
        while {p.pid for p in workers(supervisor)} & {first[0].pid} or \
                len(workers(supervisor)) < 2:
            assert time.monotonic() < deadline, "the killed worker was not restarted:\n" + \
                log.read_text()[-3000:]
            time.sleep(0.2)
        total += produce(kafka, topic, sim, 50)
        wait_stored(db, total, supervisor, log)
        children = workers(supervisor)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(60) == 0, log.read_text()[-3000:]
        gone, alive = psutil.wait_procs(children, timeout=5)
        assert not alive
    finally:
        if supervisor.poll() is None:
            for child in psutil.Process(supervisor.pid).children():
                child.kill()
            supervisor.kill()
            supervisor.wait(10)
    text = log.read_text()
    assert "worker 0" in text or "worker 1" in text  # the restart is logged
    assert "restarting" in text
