"""A node that falls silent while no processor watches it is still reported.

``NodeSilence`` judges the nodes it has frames from. A processor that starts
(a restart, a rolling upgrade) or takes a partition over has none from a
node that died meanwhile: the store tells it which nodes its partitions hold
and when each last sent (``pipeline.ownership``). Over the in-process bus and
a real SQLite store; ``tests/integration/test_rebalance_alerts.py`` does the
same across a real broker's rebalance.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fleetwatch.frame import Frame
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus import Partition
from fleetwatch.pipeline.bus.memory import MemoryBus, MemoryConsumer
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import TOPIC, frame, send, wait_for
from tests.models.helpers import busy, node
from tests.store.helpers import stored

T0 = time.time() - 3600
STEP = 10.0  # seconds between two frames of a node


def ticks(nodes: tuple[str, ...], start: int, end: int) -> list[Frame]:
    return [frame(n, T0 + STEP * k) for k in range(start, end) for n in nodes]


def silent_alerts(db: Path) -> list[Alert]:
    store = SqliteStore(db, read_only=True)
    try:
        return [a for a in store.alerts(states=("pending", "firing", "resolved"))
                if a.rule == "node_silent"]
    finally:
        store.close()


def run_until_stored(db: Path, frames: list[Frame], expected_rows: int,
                     consumer: type[MemoryConsumer] = MemoryConsumer) -> Processor:
    """One processor's life: it consumes ``frames`` over a fresh bus, then stops."""
    bus, store = MemoryBus(), SqliteStore(db)
    processor = Processor(store, [NodeSilence()])
    send(bus, frames)
    stop = threading.Event()
    thread = threading.Thread(target=processor.run, args=(consumer(bus, TOPIC, "g"), stop, 10),
                              daemon=True)
    thread.start()
    try:
        wait_for(lambda: stored(db) == expected_rows)
        wait_for(lambda: processor.stats.frames == len(frames))
    finally:
        stop.set()
        thread.join(30)
        store.close()
    assert not thread.is_alive()
    return processor


def test_a_node_that_died_while_no_processor_ran_is_reported_after_the_restart(
        tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    run_until_stored(db, ticks(("a", "b"), 0, 6), 12)   # both send for a minute
    assert silent_alerts(db) == []
    # The processor is down; "b" dies. The new one hears only "a", for 3 minutes.
    after = run_until_stored(db, ticks(("a",), 6, 24), 12 + 18)
    alerts = silent_alerts(db)
    assert [(a.node, a.device, a.state, a.severity) for a in alerts] == [
        ("b", "host", "firing", "critical")]
    assert "b has sent nothing for" in alerts[0].message
    assert "its last frame: " in alerts[0].message  # its interval is new to this processor
    assert alerts[0].value >= 60.0                     # silent_min_s past its last frame
    assert {a.node for a in after.alerts.open} == {"b"}


def test_a_node_that_keeps_sending_is_not_called_silent_after_a_restart(
        tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    run_until_stored(db, ticks(("a", "b"), 0, 6), 12)
    run_until_stored(db, ticks(("a", "b"), 6, 24), 48)
    assert silent_alerts(db) == []


def test_a_silent_nodes_open_alert_goes_on_across_restarts_without_a_duplicate(
        tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    run_until_stored(db, ticks(("a", "b"), 0, 6) + ticks(("a",), 6, 20), 12 + 14)
    first = silent_alerts(db)
    assert [(a.node, a.state) for a in first] == [("b", "firing")]
    run_until_stored(db, ticks(("a",), 20, 40), 26 + 20)   # restarted: still silent
    again = silent_alerts(db)
    assert [(a.id, a.state, a.fired_ts) for a in again] == [
        (first[0].id, "firing", first[0].fired_ts)]
    assert again[0].value > first[0].value                 # silent for longer now
    # "b" comes back: the alert resolves, once.
    run_until_stored(db, ticks(("a", "b"), 40, 43), 46 + 6)
    assert [(a.id, a.state) for a in silent_alerts(db)] == [(first[0].id, "resolved")]


class Elsewhere(MemoryConsumer):
    """A member whose topic has a second partition, another member's, holding "b"."""

    def partition_of(self, key: bytes) -> Partition | None:
        return (TOPIC, 1) if key == b"b" else (TOPIC, 0)


def test_a_silent_node_of_another_members_partition_is_left_to_that_member(
        tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    run_until_stored(db, ticks(("a", "b"), 0, 6), 12)
    after = run_until_stored(db, ticks(("a",), 6, 24), 30, consumer=Elsewhere)
    assert silent_alerts(db) == []
    assert set(after.ownership.nodes) == {("c1", "a")}


def test_a_replay_does_not_take_the_stores_other_nodes_as_its_own(tmp_path: Path) -> None:
    # No bus: nothing was assigned, so nothing is expected from the store.
    db = tmp_path / "store.db"
    run_until_stored(db, ticks(("a", "b"), 0, 6), 12)
    store = SqliteStore(db)
    processor = Processor(store, [NodeSilence()])
    processor.process(ticks(("a",), 6, 24))
    store.close()
    assert silent_alerts(db) == []


def test_an_expected_node_is_judged_by_the_fleets_usual_interval() -> None:
    d = NodeSilence()
    for k in range(4):   # the fleet reports every 30 s: a node is silent after 6 x 30 s
        d.update([node(1000 + 30.0 * k, [busy(60)], name=n) for n in ("a", "c")])
    d.expect([("c", "r1", "b", 1090.0)])    # b, from the store: last frame at 1090
    silent_from = {}
    for k in range(4, 12):                  # only "a" goes on
        for f in d.update([node(1000 + 30.0 * k, [busy(60)], name="a")]):
            silent_from.setdefault(f.node, (f.ts, f.message))
    assert silent_from.pop("")[0] == 1090 + 210  # b and c stopped together: their rack
    assert silent_from.keys() == {"b", "c"}
    assert silent_from["b"][0] == silent_from["c"][0] == 1090 + 210  # first past 6 x 30 s
    assert "its last frame: 1970-01-01 00:18:10 UTC" in silent_from["b"][1]
    assert "it reports every 30 s" in silent_from["c"][1]
    # A frame newer than the store's (it came first) is not moved back by the store's.
    d.expect([("c", "r1", "a", 0.0)])
    assert "a" not in {f.node for f in d.update([node(1400, [busy(60)], name="a")])}


def test_a_node_the_store_names_in_another_cluster_is_left_to_that_clusters_processors(
        ) -> None:
    """One store, two clusters, each with its own topic and processors: the nodes the store
    names at a takeover include the other cluster's, which this processor never hears."""
    d = NodeSilence()
    d.expect([("other", "r1", "x", 1000.0), ("c", "r1", "b", 1000.0)])
    found = set()
    for k in range(20):
        found |= {f.node for f in d.update([node(1000 + 30.0 * k, [busy(60)], name="a")])}
    assert found == {"b"}


def test_a_node_silent_before_the_restart_is_silent_since_its_limit_not_since_detection(
        tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    run_until_stored(db, ticks(("a", "b"), 0, 6), 12)   # both send for a minute: b's last at 50
    # A processor starts 33 min later and hears only "a".
    run_until_stored(db, ticks(("a",), 200, 218), 12 + 18)
    (a,) = silent_alerts(db)
    last_b = T0 + STEP * 5
    # Started when b's silence passed its limit (silent_min_s = 60 s after its last frame),
    # not at detection by the new processor, 33 min later ("since 6 min ago" for a 4 h outage).
    assert abs(a.started_ts - (last_b + 60.0)) < 0.01, (a.started_ts - last_b, a.message)
    # And firing since then (Alertmanager's startsAt, "firing since"), not since the takeover.
    assert a.fired_ts is not None and abs(a.fired_ts - a.started_ts) < 0.01, (
        a.fired_ts - a.started_ts)
    assert a.value >= 1950.0                           # the silence so far
    assert "interval_s" not in a.evidence  # not known to this processor: not said as 0
