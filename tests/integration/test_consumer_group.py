"""Issue #4's done-when: a consumer group of ``fleetwatch process`` survives a SIGKILL.

100k small frames (1 GPU each) and some bad messages go to a topic of six
partitions. Two ``fleetwatch process`` subprocesses in one group write to
one SQLite store; one is killed with SIGKILL mid-run and started again.
Afterwards every sample is in the store exactly once (the ``samples``
table's key is ``(ts, sid)``, so no sample can be there twice: the check is
that the count and the values are exactly the expected ones, per node and
metric), and every bad message is on the dead-letter topic with a
``reason`` header.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import msgpack
import pytest

from fleetwatch.codec import encode
from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.points import PointMaker
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server
from tests.store.helpers import stored

pytestmark = pytest.mark.kafka
NODES, TICKS = 100, 1000          # 100,000 frames
PARTITIONS = 6
BAD = 40
KILL_AT = 300_000  # samples stored when one member is killed (of 1.5M)


def bad_messages() -> list[bytes]:
    """Half are not MessagePack frames at all, half are frames of an unknown version."""
    return [b"garbage-%d" % i if i % 2 else msgpack.packb([99, i]) for i in range(BAD)]


def produce(kafka: Server, topic: str) -> tuple[Counter[tuple[str, str]], dict[str, float], int]:
    """Publish the frames and the bad messages; return what the store must then hold."""
    sim = FleetSim(SimParams(nodes=NODES, gpus=1, interval_s=15.0, seed=4),
                   start_ts=time.time() - 6 * 3600)
    maker = PointMaker()
    counts: Counter[tuple[str, str]] = Counter()
    sums: dict[str, float] = {}
    total = 0
    bad = iter(bad_messages())
    p = KafkaProducer(kafka.address, linger_ms=20)
    for tick in range(TICKS):
        sim.step()
        frames = sim.frames()
        for f in frames:
            p.send(topic, encode(f), key=f.node.encode())
        if tick % (TICKS // BAD) == 0:
            p.send(topic, next(bad), key=b"bad")
        for key, _, value in maker.points(frames):
            counts[(key.node, key.metric)] += 1
            sums[key.metric] = sums.get(key.metric, 0.0) + value
            total += 1
        if tick % 100 == 99:
            p.flush(30)
    p.flush(30)
    p.close()
    return counts, sums, total


def start_processor(kafka: Server, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"],
                                env={**clean, **env}, stdout=out, stderr=subprocess.STDOUT,
                                cwd=log.parent)


def read_dead_letters(kafka: Server, topic: str, timeout_s: float = 30.0) -> list[Message]:
    c = KafkaConsumer(kafka.address, topic, f"check-{uuid.uuid4().hex[:6]}",
                      session_timeout_ms=6000, heartbeat_interval_ms=2000)
    out: list[Message] = []
    wanted = set(bad_messages())
    try:
        deadline = time.monotonic() + timeout_s
        while not wanted <= {m.value for m in out} and time.monotonic() < deadline:
            out += c.poll(500, timeout_s=0.5)
    finally:
        c.close()
    return out


def test_group_of_two_survives_sigkill_every_sample_stored_once(
        kafka: Server, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    topic, dead, group = f"frames-{run}", f"frames-{run}.dead", f"processors-{run}"
    ensure_topic(kafka.address, topic, PARTITIONS)
    ensure_topic(kafka.address, dead, 1)
    db = tmp_path / "store.db"
    SqliteStore(db).close()  # schema made once, not raced by the two members
    env = {"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
           "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": dead,
           "FLEETWATCH_BUS_GROUP": group, "FLEETWATCH_STORE_KIND": "sqlite",
           "FLEETWATCH_STORE_PATH": str(db), "FLEETWATCH_PROCESSOR_METRICS_PORT": "0"}
    logs = [tmp_path / "a.log", tmp_path / "b.log", tmp_path / "a2.log"]
    # The members join while the frames are produced: joining and the session
    # timeout after the kill are waits, producing is work.
    procs = [start_processor(kafka, env, logs[0]), start_processor(kafka, env, logs[1])]
    expected: list[tuple[Counter[tuple[str, str]], dict[str, float], int]] = []
    producer = threading.Thread(target=lambda: expected.append(produce(kafka, topic)))
    t0 = time.monotonic()
    producer.start()
    try:
        deadline = time.monotonic() + 120
        while stored(db) < KILL_AT:
            assert time.monotonic() < deadline, "processors made no progress:\n" + \
                "\n".join(p.read_text()[-2000:] for p in logs[:2])
            assert all(p.poll() is None for p in procs), "a processor exited"
            time.sleep(0.2)
        procs[0].send_signal(signal.SIGKILL)  # mid-run: no commit, no leaving the group
        procs[0].wait(10)
        killed_at = stored(db)
        procs.append(start_processor(kafka, env, logs[2]))
        producer.join(120)
        assert expected, "producing failed"
        counts, sums, total = expected[0]
        produced_s = time.monotonic() - t0
        deadline = time.monotonic() + 180
        while (n := stored(db)) < total:
            assert time.monotonic() < deadline, f"{n} of {total} samples stored:\n" + \
                "\n".join(p.read_text()[-2000:] for p in logs)
            assert all(p.poll() is None for p in procs[1:]), "a processor exited"
            time.sleep(0.5)
        dead_letters = read_dead_letters(kafka, dead)
    finally:
        producer.join(120)
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
    assert killed_at < total, "the kill came after the work was done"
    assert [p.returncode for p in procs[1:]] == [0, 0]

    # Every (series, timestamp) is one point of the export: counts per series and
    # value sums per metric equal to what was produced mean each sample is there once.
    got: Counter[tuple[str, str]] = Counter()
    got_sums: dict[str, float] = {}
    for key, _, value in SqliteStore(db, read_only=True).export():
        got[(key.node, key.metric)] += 1
        got_sums[key.metric] = got_sums.get(key.metric, 0.0) + value
    assert sum(got.values()) == total
    assert got == counts
    for metric, value in sums.items():
        assert got_sums[metric] == pytest.approx(value, rel=1e-9), metric

    wanted = bad_messages()
    by_value = {m.value: m for m in dead_letters}
    assert set(wanted) <= set(by_value), "bad messages missing from the dead-letter topic"
    assert len(by_value) == BAD  # nothing good was dead-lettered
    for value in wanted:
        headers = dict(by_value[value].headers)
        assert headers.get("reason"), headers
        assert headers["source_topic"] == topic.encode()
        if value.startswith(b"garbage"):
            assert b"MessagePack" in headers["reason"]
        else:
            assert b"version" in headers["reason"]
    print(f"produced {TICKS * NODES} frames + {BAD} bad in {produced_s:.1f}s; "
          f"{total} samples stored; killed one member at {killed_at}")
