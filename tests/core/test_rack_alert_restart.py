"""An open rack (or room) alert is taken over by a restarted processor as node alerts are:
it has no node, so it was never read back, stayed FIRING in the store for ever while the
new processor opened a second alert for the same rack, and a restarted rack detector,
having seen no change itself, called a failure already paged "a hot aisle" (r21 hunt 3)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from fleetwatch.models import Finding
from fleetwatch.models.rack import RackCooling
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import frame
from tests.models.test_rack_peers import ROOM, fleet

T = time.time() - 600


def rack_alert(ts: float) -> Alert:
    return Alert(id=f"rack_cooling/c1//rack:rack-02/{int(ts * 1000)}", rule="rack_cooling",
                 severity="critical", cluster="c1", rack="rack-02", node="",
                 device="rack:rack-02", state="firing", started_ts=ts, updated_ts=ts + 60,
                 value=15.0, message="Rack rack-02: its inlet air is 15 °C above", fired_ts=ts)


def test_a_restarted_processor_takes_over_the_open_rack_alert_of_a_cluster_it_sees(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    store.write_alerts([rack_alert(T)])
    book, loaded = AlertBook(requirements={"rack_cooling": ()}), []
    own = Ownership(store, book, on_loaded=[loaded.append])
    own.assigned([("frames", 0)])
    own.build([frame("node-2", T + 100)], [Message(b"", b"node-2", "frames", 0, 0)])
    assert [(a.id, a.state) for a in book.open] == [(rack_alert(T).id, "firing")]
    assert [a.id for batch in loaded for a in batch] == [rack_alert(T).id]


def test_a_restarted_rack_detector_keeps_an_adopted_critical_rack_critical() -> None:
    """The failure was paged before the restart: the excess it sees from its first sample
    is that failure's, not a hot aisle's."""
    d = RackCooling()
    d.adopt([rack_alert(50.0)])
    hot = {n: v + (15.0 if n.startswith("r2") else 0.0) for n, v in ROOM.items()}
    found = d.update(fleet(100.0, hot))
    assert [(f.rack, f.severity, f.since) for f in found] == [("rack-02", "critical", 50.0)]


def test_the_rack_alert_is_taken_over_when_the_nodes_were_built_before_any_frame(
        tmp_path: Path) -> None:
    """``up --keep`` (a bus, nodes the store knows): the assignment builds every stored node
    as "expected" before a frame comes, so the cluster's first frames bring no new node.
    Its rack alert was then never loaded: it stayed FIRING for ever beside a new one, and
    muted the rack's later GPU alerts (postmortem D1)."""
    store = SqliteStore(tmp_path / "store.db")
    store.write([frame("node-2", T + 50)])
    store.write_alerts([rack_alert(T)])
    book, loaded, expected = AlertBook(requirements={"rack_cooling": ()}), [], []
    own = Ownership(store, book, on_loaded=[loaded.append], on_expected=[expected.append])
    own.locate = lambda key: ("frames", 0)
    own.assigned([("frames", 0)])
    own.build([], None)  # an idle poll: the stored node is built, expected
    assert [n for batch in expected for _, _, n, _, _ in batch] == ["node-2"]
    own.build([frame("node-2", T + 100)], [Message(b"", b"node-2", "frames", 0, 0)])
    assert [(a.id, a.state) for a in book.open] == [(rack_alert(T).id, "firing")]
    assert [a.id for batch in loaded for a in batch] == [rack_alert(T).id]


def test_a_processor_restarted_on_a_bus_resolves_the_rack_alert_it_takes_over(
        tmp_path: Path) -> None:
    """Over the in-process bus and a real SQLite store, as ``up --keep`` runs: the restarted
    processor polls nothing first (its nodes are built as expected), then the rack's frames
    come, clear: the open rack alert is taken over and resolved, no second one opens."""
    import threading

    from fleetwatch.models.node_silence import NodeSilence
    from fleetwatch.pipeline.bus.memory import MemoryBus, MemoryConsumer
    from fleetwatch.pipeline.processor import Processor
    from tests.core.test_processor_hardening import TOPIC, send, wait_for

    db = tmp_path / "store.db"
    store = SqliteStore(db)
    t0 = time.time() - 600
    store.write([frame(n, t0 + 10 * k) for k in range(6) for n in ("a", "b")])
    ghost = Alert(id=f"rack_cooling/c1//rack:r1/{int(t0 * 1000)}", rule="rack_cooling",
                  severity="critical", cluster="c1", rack="r1", node="", device="rack:r1",
                  state="firing", started_ts=t0, updated_ts=t0 + 50, value=9.0,
                  message="Rack r1: hot", fired_ts=t0)
    store.write_alerts([ghost])
    bus = MemoryBus()
    processor = Processor(store, [RackCooling(), NodeSilence()])
    stop = threading.Event()
    thread = threading.Thread(target=processor.run,
                              args=(MemoryConsumer(bus, TOPIC, "g"), stop, 10), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(processor.ownership.nodes) == 2)  # built before any frame
        send(bus, [frame(n, t0 + 10 * k) for k in range(6, 12) for n in ("a", "b")])
        wait_for(lambda: processor.stats.frames == 12)
        wait_for(lambda: not any(a.rule == "rack_cooling" for a in processor.alerts.open))
    finally:
        stop.set()
        thread.join(30)
    racks = [a for a in store.alerts(states=("pending", "firing", "resolved"))
             if a.rule == "rack_cooling"]
    store.close()
    assert [(a.id, a.state) for a in racks] == [(ghost.id, "resolved")]


def test_of_two_open_alerts_of_one_rack_the_older_is_resolved_at_the_first_frame(
        tmp_path: Path) -> None:
    """A store an older release left with the rack's alert open twice (the ghost and the
    one opened beside it after a restart): the newer goes on, the older is resolved."""
    store = SqliteStore(tmp_path / "store.db")
    ghost, newer = rack_alert(T), rack_alert(T + 500)
    store.write_alerts([newer, ghost])
    book, loaded = AlertBook(requirements={"rack_cooling": ("gpu_temp_c",)}), []
    own = Ownership(store, book, on_loaded=[loaded.append])
    own.assigned([("frames", 0)])
    frames = [frame("node-2", T + 700, 80.0)]
    own.build(frames, [Message(b"", b"node-2", "frames", 0, 0)])
    assert [a.id for a in book.open] == [newer.id]
    found = [Finding("rack_cooling", "c1", "rack-02", "", None, T + 700, 15.0, "hot",
                     "critical", scope="rack")]
    changes = book.observe([dataclasses.replace(frames[0], rack="rack-02")], found)
    assert [(a.id, a.state, a.resolved_ts) for a in changes if a.state == "resolved"] == [
        (ghost.id, "resolved", T + 700)]
    store.write_alerts(changes)
    book.apply(changes)
    assert [a.id for a in book.open] == [newer.id]
    assert [a.id for a in store.alerts()] == [newer.id]
    assert [a.id for a in book.observe([], [])] == []  # resolved once
