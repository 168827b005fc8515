"""Open alerts follow their node's partition across a rebalance (real broker).

Two processors in one group share a topic of two partitions and one store.
Every node runs hot: one firing alert per GPU. When a member leaves, the
other takes its partition and continues its alerts (same ids, no duplicate);
when a new member joins, the alerts of the nodes it takes are its own and
the old owner forgets them. Cooling resolves every alert exactly once.
The members' notifiers follow: each alert is notified firing once and
resolved once in all, and re-sent (adopted) only by its node's owner.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server
from tests.store.helpers import stored

pytestmark = pytest.mark.kafka
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
NODES = [f"node-{i:02d}" for i in range(8)]
T0 = time.time() - 1800


# Not ``tests.recording_sink.Recording``: a rebalance is judged by what a sink keeps
# re-sending (adopt, forget), as Alertmanager's does.
class Recorder:
    """A notifying sink that records what the notifier hands it, as Alertmanager's does:
    changes to notify, alerts adopted (to keep re-sending), nodes forgotten."""

    name = "recorder"
    notify_only = True

    def __init__(self) -> None:
        self.notified: list[tuple[str, str, str]] = []  # (node, alert id, state)
        self.resending: dict[str, Alert] = {}            # alert id -> alert, as Alertmanager's

    def send(self, changes: list[Notice]) -> None:
        for n in changes:
            if n.notify:
                self.notified.append((n.alert.node, n.alert.id, n.alert.state))
                if n.alert.state == "resolved":
                    self.resending.pop(n.alert.id, None)
                else:
                    self.resending[n.alert.id] = n.alert

    def adopt(self, notices: list[Notice]) -> None:
        self.resending.update((n.alert.id, n.alert) for n in notices)

    def forget(self, nodes: set[str]) -> None:
        for alert_id in [i for i, a in self.resending.items() if a.node in nodes]:
            del self.resending[alert_id]

    def nodes(self) -> set[str]:
        return {a.node for a in list(self.resending.values())}  # read from another thread

    def close(self) -> None:
        pass


class Member:
    def __init__(self, kafka: Server, topic: str, group: str, db: Path) -> None:
        self.store = SqliteStore(db)
        self.consumer = KafkaConsumer(kafka.address, topic, group, **FAST)
        self.revoked: list[set[str]] = []  # what the per-node state hook was told
        self.sink = Recorder()
        self.notifier = Notifier([self.sink], background=False)
        self.processor = Processor(self.store, [GpuTemperatureLimit(85.0, 0.0), NodeSilence()],
                                   on_revoked=[self.revoked.append], notifier=self.notifier)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.processor.run,
                                       args=(self.consumer, self.stop, 50), daemon=True)
        self.thread.start()

    @property
    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def open_nodes(self) -> set[str]:
        return {a.node for a in self.processor.alerts.open}

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        self.consumer.close()  # leaves the group: its partitions move now
        self.store.close()


def partition_of(node: str) -> int:
    """Where the producer's default partitioner puts a node's frames (2 partitions)."""
    return (murmur2(node.encode()) & 0x7FFFFFFF) % 2


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def tick(kafka: Server, topic: str, ts: float, temp: float,
         nodes: list[str] = NODES) -> None:
    p = KafkaProducer(kafka.address)
    for node in nodes:
        f = Frame("c1", "r1", node, ts, (GpuReading(0, f"GPU-{node}", "H100",
                                                    {"gpu_temp_c": temp}),))
        p.send(topic, encode(f), key=node.encode())
    p.flush(30)
    p.close()


def all_alerts(db: Path) -> list:
    store = SqliteStore(db, read_only=True)
    try:
        return store.alerts(states=("pending", "firing", "resolved"))
    finally:
        store.close()


def fresh_group(kafka: Server, tmp_path: Path) -> tuple[str, str, Path]:
    """A topic of two partitions, a consumer group and an empty store of this test's own."""
    run = uuid.uuid4().hex[:8]
    topic, group = f"frames-{run}", f"processors-{run}"
    ensure_topic(kafka.address, topic, 2)
    db = tmp_path / "store.db"
    SqliteStore(db).close()
    return topic, group, db


def test_an_open_alert_moves_with_its_partition_without_a_duplicate(
        kafka: Server, tmp_path: Path) -> None:
    topic, group, db = fresh_group(kafka, tmp_path)
    a, b = Member(kafka, topic, group, db), Member(kafka, topic, group, db)
    members = [a, b]
    try:
        wait_for("one partition each", lambda: len(a.owned) == 1 and len(b.owned) == 1)
        tick(kafka, topic, T0, 95.0)
        wait_for("8 firing alerts", lambda: sum(
            x.state == "firing" for x in all_alerts(db)) == len(NODES))
        first = {x.node: x.id for x in all_alerts(db)}
        assert a.open_nodes() | b.open_nodes() == set(NODES)
        assert not a.open_nodes() & b.open_nodes()
        wait_for("each member notified its own", lambda: a.sink.nodes() == a.open_nodes()
                 and b.sink.nodes() == b.open_nodes())

        b.close()  # b leaves: a takes its partition and b's alerts with it
        members.remove(b)
        wait_for("a owns both partitions", lambda: len(a.owned) == 2)
        tick(kafka, topic, T0 + 10, 96.0)
        wait_for("the second tick stored", lambda: stored(db) == 2 * len(NODES))
        wait_for("a evaluated it", lambda: a.open_nodes() == set(NODES) and all(
            x.updated_ts == T0 + 10 for x in a.processor.alerts.open))
        rows = all_alerts(db)
        assert len(rows) == len(NODES), "a raised duplicates of alerts b had open"
        assert {x.node: x.id for x in rows} == first
        assert a.sink.nodes() == set(NODES)  # b's alerts adopted: a keeps them alive

        c = Member(kafka, topic, group, db)  # a new member takes one partition from a
        members.append(c)
        wait_for("one partition each again", lambda: len(a.owned) == 1 and len(c.owned) == 1)
        kept = {n for n in NODES if partition_of(n) in a.owned}
        assert kept and kept < set(NODES)
        assert a.open_nodes() == kept  # the old owner forgot the nodes that moved
        assert set().union(*a.revoked) == set(NODES) - kept  # and told its per-node state
        assert a.sink.nodes() == kept  # and no longer re-sends their alerts
        tick(kafka, topic, T0 + 20, 97.0)
        wait_for("c continues the moved alerts",
                 lambda: c.open_nodes() == set(NODES) - kept)
        wait_for("c re-sends them", lambda: c.sink.nodes() == set(NODES) - kept)
        rows = all_alerts(db)
        assert len(rows) == len(NODES) and {x.node: x.id for x in rows} == first

        tick(kafka, topic, T0 + 30, 50.0)  # cool: every alert resolves, once
        wait_for("all resolved", lambda: all(x.state == "resolved" for x in all_alerts(db)))
        rows = all_alerts(db)
        assert len(rows) == len(NODES) and all(x.resolved_ts == T0 + 30 for x in rows)
        wait_for("both books empty", lambda: not a.open_nodes() and not c.open_nodes())
        notified = sorted(x for m in (a, b, c) for x in m.sink.notified)
        assert notified == sorted((n, first[n], state) for n in NODES
                                  for state in ("firing", "resolved")), \
            "an alert was notified again after its partition moved, or not resolved"
        assert not a.sink.resending and not c.sink.resending
    finally:
        for m in members:
            m.close()


def test_a_node_that_died_while_no_member_ran_is_reported_once_by_its_partitions_owner(
        kafka: Server, tmp_path: Path) -> None:
    topic, group, db = fresh_group(kafka, tmp_path)
    a = Member(kafka, topic, group, db)
    try:
        wait_for("a owns both partitions", lambda: len(a.owned) == 2)
        tick(kafka, topic, T0, 50.0)
        wait_for("the first tick stored", lambda: stored(db) == len(NODES))
    finally:
        a.close()
    # No member runs (a rolling upgrade); node-03 dies, the others go on for 3 minutes.
    dead, live = "node-03", [n for n in NODES if n != "node-03"]
    for k in range(1, 19):
        tick(kafka, topic, T0 + 10 * k, 50.0, live)
    b, c = Member(kafka, topic, group, db), Member(kafka, topic, group, db)
    # The live nodes go on sending while the members judge (a fleet does: were every frame
    # to stop, the whole rack would be silent together, one rack_silent, which the rack's
    # judge now raises with several members, muting node-03's page under it).
    going, steps = threading.Event(), iter(range(19, 10_000))

    def go_on() -> None:
        while not going.wait(1.0):
            tick(kafka, topic, T0 + 10 * next(steps), 50.0, live)

    feeder = threading.Thread(target=go_on, daemon=True)
    try:
        wait_for("one partition each", lambda: len(b.owned) == 1 and len(c.owned) == 1)
        wait_for("every tick stored", lambda: stored(db) >= len(NODES) + 18 * len(live))
        feeder.start()

        def silent() -> list[tuple[str, str]]:
            return [(x.node, x.state) for x in all_alerts(db) if x.rule == "node_silent"]

        wait_for("node-03 reported silent", lambda: silent() == [(dead, "firing")])
        owner, other = (b, c) if partition_of(dead) in b.owned else (c, b)
        wait_for("its partition's owner holds it",
                 lambda: dead in owner.open_nodes() and dead in owner.sink.nodes())
        assert dead not in other.open_nodes() and dead not in other.sink.nodes()
        assert [n for n, _, _ in owner.sink.notified + other.sink.notified] == [dead]
        # Each member places every node as the producers did: where its frames came from.
        for m in (b, c):
            placed = m.processor.ownership.placement()
            assert {n for _, n in placed} == {n for n in NODES if partition_of(n) in m.owned}
            for (_, n), partition in placed.items():
                assert partition == m.consumer.partition_of(n.encode()) == (
                    topic, partition_of(n))
        assert silent() == [(dead, "firing")]
    finally:
        going.set()
        if feeder.is_alive():
            feeder.join(30)
        b.close()
        c.close()
