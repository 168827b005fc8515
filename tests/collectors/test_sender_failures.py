"""The sender thread when the producer fails in a way no outage explains: no frame is lost
silently.

Every frame put is accounted for: acknowledged by the broker, or counted as dropped
(what ``/metrics`` and the agent's last line report). The producers here are the
agent's own ``SpoolingProducer`` in front of a broker that raises what kafka-python
raises (a ``ValueError`` for a topic Kafka cannot have) or what no contract names
(a ``RuntimeError``), so the spool takes part as it does in the agent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kafka.util import ensure_valid_topic_name

from fleetwatch.collectors.sender import Sender
from fleetwatch.collectors.spooling import SpoolingProducer


class Broker:
    """A Producer that checks topic names as kafka-python does, and fails on demand.

    ``failing`` > 0: that many more calls to ``send`` raise ``RuntimeError`` (-1: all);
    ``flush_failing`` the same for ``flush``.
    """

    def __init__(self, failing: int = 0, flush_failing: int = 0) -> None:
        self.failing = failing
        self.flush_failing = flush_failing
        self.delivered: list[bytes] = []
        self._held: list[bytes] = []
        self.lock = threading.Lock()

    def send(self, topic: str, value: bytes, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = ()) -> None:
        ensure_valid_topic_name(topic)
        with self.lock:
            if self.failing:
                self.failing -= 1 if self.failing > 0 else 0
                raise RuntimeError("something no outage explains")
            self._held.append(value)

    def flush(self, timeout_s: float | None = None) -> None:
        with self.lock:
            if self.flush_failing:
                self.flush_failing -= 1
                raise RuntimeError("a flush no outage explains")
            self.delivered += self._held
            self._held.clear()

    def close(self) -> None:
        pass


class Counts:
    """The agent's counters, as ``AgentHealth`` gets them."""

    def __init__(self) -> None:
        self.by_name: dict[str, int] = {}

    def event(self, name: str, n: int) -> None:
        self.by_name[name] = self.by_name.get(name, 0) + n

    def dropped(self, n: int) -> None:
        self.event("dropped", n)


def agent_sender(broker: Broker, spool: Path, counts: Counts,
                 max_queued: int = 100_000) -> tuple[SpoolingProducer, Sender]:
    producer = SpoolingProducer(broker, spool, 1 << 20, on_event=counts.event,
                                retry_min_s=0.0, retry_max_s=0.0, linger_s=0.0)
    sender = Sender(producer, on_dropped=counts.dropped, max_queued=max_queued, idle_s=0.02,
                    retry_min_s=0.02, retry_max_s=0.05)
    return producer, sender


def wait_for(done: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    return done()


def test_frames_the_broker_refuses_are_counted_and_the_sender_is_not_up(
        tmp_path: Path) -> None:
    # The tester's empty bus.topic: kafka-python refuses every send with a ValueError.
    broker, counts = Broker(), Counts()
    producer, sender = agent_sender(broker, tmp_path / "spool", counts)
    sender.start()
    for i in range(3):
        sender.put("", b"frame-%d" % i, b"node")
    assert wait_for(lambda: counts.by_name.get("dropped", 0) == 3), counts.by_name
    assert sender.dropped == 3 and not sender.reachable
    # A frame that gets through again brings it back.
    sender.put("fleetwatch.frames", b"good", b"node")
    assert wait_for(lambda: broker.delivered == [b"good"])
    assert wait_for(lambda: sender.reachable)
    sender.close(timeout_s=5)
    assert counts.by_name == {"sent": 1, "dropped": 3}


def test_the_agents_broker_up_gauge_is_0_while_the_producer_refuses_every_frame(
        tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from fleetwatch.collectors.agent_health import AgentHealth

    broker, counts = Broker(), Counts()
    producer, sender = agent_sender(broker, tmp_path / "spool", counts)
    health = AgentHealth()
    health.watch(producer, sender)
    registry = CollectorRegistry()
    registry.register(health)

    def broker_up() -> str:
        lines = generate_latest(registry).decode().splitlines()
        return next(x for x in lines if x.startswith("fleetwatch_agent_broker_up "))

    sender.start()
    sender.put("", b"frame", b"node")   # refused: the spool reached its broker, nothing went
    assert wait_for(lambda: not sender.reachable)
    assert producer.reachable and broker_up() == "fleetwatch_agent_broker_up 0.0"
    sender.put("fleetwatch.frames", b"good", b"node")
    assert wait_for(lambda: sender.reachable)
    assert broker_up() == "fleetwatch_agent_broker_up 1.0"
    sender.close(timeout_s=5)


def test_an_unexpected_failure_keeps_the_frames_and_sends_them_in_order(
        tmp_path: Path) -> None:
    broker, counts = Broker(failing=3), Counts()
    producer, sender = agent_sender(broker, tmp_path / "spool", counts)
    values = [b"frame-%d" % i for i in range(5)]
    for v in values:
        sender.put("fleetwatch.frames", v, b"node")
    sender.start()
    assert wait_for(lambda: len(broker.delivered) == 5), broker.delivered
    assert broker.delivered == values
    assert sender.dropped == 0 and broker.failing == 0
    assert wait_for(lambda: sender.reachable)
    sender.close(timeout_s=5)
    assert counts.by_name == {"sent": 5}


def test_a_flush_that_fails_unexpectedly_passes_without_losing_a_frame(
        tmp_path: Path) -> None:
    broker, counts = Broker(flush_failing=2), Counts()
    producer, sender = agent_sender(broker, tmp_path / "spool", counts)
    sender.start()
    values = [b"frame-%d" % i for i in range(3)]
    for v in values:
        sender.put("fleetwatch.frames", v, b"node")
    assert wait_for(lambda: set(broker.delivered) == set(values)), broker.delivered
    # The send that raised may have been taken (here it was: its flush failed after):
    # sent again, it arrives twice, in order. At least once, never zero times unsaid.
    assert list(dict.fromkeys(broker.delivered)) == values
    assert wait_for(lambda: sender.reachable)
    sender.close(timeout_s=5)
    assert sender.dropped == 0 and "dropped" not in counts.by_name


def test_frames_that_cannot_be_handed_on_are_counted_when_the_sender_stops(
        tmp_path: Path) -> None:
    # A failure that never passes: the bounded queue drops the oldest, stop counts the rest.
    broker, counts = Broker(failing=-1), Counts()
    producer, sender = agent_sender(broker, tmp_path / "spool", counts, max_queued=4)
    sender.start()
    for i in range(10):
        sender.put("fleetwatch.frames", b"frame-%d" % i, b"node")
        time.sleep(0.01)
    time.sleep(0.2)  # a few tries
    sender.close(timeout_s=5)
    assert sender.queued == 0 and broker.delivered == []
    assert sender.dropped == 10 and counts.by_name == {"dropped": 10}
    assert not sender.reachable


def test_every_frame_is_accounted_for_while_failures_come_and_go(tmp_path: Path) -> None:
    broker, counts = Broker(), Counts()
    producer, sender = agent_sender(broker, tmp_path / "spool", counts, max_queued=50)
    sender.start()
    for i in range(300):
        if i % 60 == 0:
            with broker.lock:
                broker.failing = 4
        sender.put("fleetwatch.frames" if i % 97 else "", b"frame-%d" % i, b"node")
        time.sleep(0.001)
    sender.close(timeout_s=5)
    delivered = [int(v.split(b"-")[1]) for v in broker.delivered]
    assert delivered == sorted(set(delivered))  # in order, once each
    assert not {0, 97, 194, 291} & set(delivered)  # the frames with no topic
    assert counts.by_name.get("sent", 0) == len(delivered)
    assert len(delivered) + counts.by_name.get("dropped", 0) == 300


def test_a_spool_that_cannot_be_written_is_counted_on_the_agents_metrics(
        tmp_path: Path) -> None:
    """The broker is away and the spool's disk refuses writes (full, a file size limit):
    each failed write is counted (``FleetwatchAgentSpoolUnwritable`` reads it), not only
    logged, while the spool's own gauges stay flat."""
    import errno

    from prometheus_client import CollectorRegistry, generate_latest

    from fleetwatch.collectors.agent_health import AgentHealth
    from fleetwatch.pipeline.bus import BusError

    class Away(Broker):
        def send(self, topic: str, value: bytes, key: bytes | None = None,
                 headers: Sequence[tuple[str, bytes]] = ()) -> None:
            raise BusError("broker 127.0.0.1:1 unreachable")

    counts = Counts()
    producer = SpoolingProducer(Away(), tmp_path / "spool", 1 << 20, on_event=counts.event,
                                retry_min_s=0.0, retry_max_s=0.0, linger_s=0.0)
    health = AgentHealth()
    health.watch(producer, None)
    registry = CollectorRegistry()
    registry.register(health)

    def sample(name: str) -> str:
        lines = generate_latest(registry).decode().splitlines()
        return next(x for x in lines if x.startswith(name + " "))

    assert sample("fleetwatch_agent_spool_write_errors_total").endswith(" 0.0")

    def refuse(records: object) -> int:
        raise OSError(errno.EFBIG, "File too large")

    producer.spool.append = refuse  # type: ignore[method-assign]
    producer.send("fleetwatch.frames", b"frame-0", b"node")
    producer.send("fleetwatch.frames", b"frame-1", b"node")
    assert sample("fleetwatch_agent_spool_write_errors_total") == (
        "fleetwatch_agent_spool_write_errors_total 2.0")
    assert counts.by_name == {"dropped": 2}
    assert sample("fleetwatch_agent_spool_bytes") == "fleetwatch_agent_spool_bytes 0.0"
    producer.close()
