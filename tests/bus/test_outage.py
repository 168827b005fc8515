"""Issue #3's done-when: an agent keeps every frame through a 60 s broker outage.

An agent-like loop publishes simulated frames (key = node) through
``SpoolingProducer`` to a broker of the test's own. The broker is stopped
for 60 s while the loop runs, and started again; meanwhile the producing
side is restarted (a new producer on the same spool directory, the old one
abandoned as a crash would). Afterwards every frame must be on the bus
exactly once, in order per node (``seq`` is 1, 2, 3... per node).

The broker keeps data in memory: a restart loses what it held. So just
before the stop the loop is held for a moment and everything acknowledged so
far is read; that loss is the test broker's, not the agent's.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fleetwatch.codec import decode, encode
from fleetwatch.collectors.sim.fleet import FleetSim, SimParams
from fleetwatch.collectors.spooling import SpoolingProducer
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from tests.servers import Server

pytestmark = pytest.mark.kafka
TOPIC = "fleetwatch.frames"
OUTAGE_S = 60.0
NODES = 6


class AgentLoop:
    """Ticks a simulated fleet every ``period_s`` and sends its frames, like the agent."""

    def __init__(self, producer: SpoolingProducer, period_s: float = 0.05) -> None:
        self.producer = producer
        self.sim = FleetSim(SimParams(nodes=NODES, gpus=1, interval_s=15.0), start_ts=1.7e9)
        self.period_s = period_s
        self.sent = 0
        self.gate = threading.Lock()  # held by the test to hold the loop between ticks
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            with self.gate:
                self.sim.step()
                for f in self.sim.frames():
                    self.producer.send(TOPIC, encode(f), key=f.node.encode())
                    self.sent += 1
            time.sleep(self.period_s)

    def join(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def spooling(own_kafka: Server, spool: Path) -> SpoolingProducer:
    inner = KafkaProducer(own_kafka.address, max_block_ms=1000, request_timeout_ms=3000,
                          delivery_timeout_ms=6000, auto_create_topics=False)
    return SpoolingProducer(inner, spool, 64 << 20, flush_timeout_s=3.0, retry_max_s=2.0)


def read_all(own_kafka: Server, group: str, n: int, timeout_s: float = 60.0) -> list[Message]:
    c = KafkaConsumer(own_kafka.address, TOPIC, group, session_timeout_ms=6000,
                      heartbeat_interval_ms=2000)
    out: list[Message] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            out += c.poll(2000, timeout_s=0.5)
        out += c.poll(2000, timeout_s=1.0)  # anything beyond n is a duplicate
    finally:
        c.close()
    return out


def test_no_frame_lost_through_a_60s_outage_and_an_agent_restart(
        own_kafka: Server, tmp_path: Path) -> None:
    ensure_topic(own_kafka.address, TOPIC, 4)
    spool = tmp_path / "spool"
    first = spooling(own_kafka, spool)
    agent = AgentLoop(first)
    agent.thread.start()
    time.sleep(3)

    with agent.gate:
        first.flush()
        assert first.spooled == 0
        before = read_all(own_kafka, "before", agent.sent)
        assert len(before) == agent.sent
        own_kafka.stop()
    outage_started = time.monotonic()

    # Half-way through the outage the producing side restarts with frames spooled.
    time.sleep(OUTAGE_S / 2)
    with agent.gate:
        assert first.backlog > 0 and first.spooled > 0
        # Abandoned without close(), as a crash would leave it; the kernel drops a dead
        # process's spool lock, which this process does by hand.
        first.spool._unlock()
        second = spooling(own_kafka, spool)
        assert second.backlog == first.backlog
        agent.producer = second
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - outage_started)))
    assert second.backlog > first.backlog

    own_kafka.start()
    ensure_topic(own_kafka.address, TOPIC, 4)  # memory storage: the topic is gone
    deadline = time.monotonic() + 60
    while second.backlog and time.monotonic() < deadline:
        time.sleep(0.5)
    assert second.backlog == 0, "the spool did not drain after the broker came back"
    time.sleep(2)  # and direct sends again
    agent.join()
    second.flush()
    assert second.backlog == 0
    second.close()

    after = read_all(own_kafka, "after", agent.sent - len(before))
    seqs: dict[str, list[int]] = {}
    for m in [*before, *after]:
        frame = decode(m.value)
        assert m.key == frame.node.encode()
        seqs.setdefault(frame.node, []).append(frame.seq)
    assert sum(map(len, seqs.values())) == agent.sent
    ticks = agent.sent // NODES
    assert ticks > 100
    for node, got in seqs.items():
        assert got == list(range(1, ticks + 1)), f"{node}: frames lost, doubled or out of order"
    assert first.spooled + second.spooled > 0
    assert second.replayed == first.spooled + second.spooled
    assert first.dropped == second.dropped == 0
