"""A PDU trip over a real broker, with the real processor, store and Alertmanager (the
shipped routes and inhibit rules): three of a rack's four nodes stop together while the
rest of the fleet sends on. Exactly one ``rack_silent`` alert fires, naming the rack and its
silent nodes; their ``node_silent`` alerts are in the store but muted under it (the store's
notification record says so, and fleetwatch posts none of them to Alertmanager, where the
rack alert is the one active alert). The nodes back, the rack alert and theirs resolve."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import frame, wait_for
from tests.servers import Server, alertmanager
from tests.sinks.test_alertmanager_routing import CONFIG

pytestmark = pytest.mark.kafka
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
RACKS = {"a0": "r1", "a1": "r1", "a2": "r1", "a3": "r1", "b0": "r2", "b1": "r2"}
TRIPPED = ("a0", "a1", "a2")
SILENT_MIN_S = 4.0


def send(producer: KafkaProducer, topic: str, seconds: float, down: tuple[str, ...] = (),
         until: threading.Event | None = None) -> None:
    """Every node but ``down`` sends a frame every 0.25 s, for ``seconds`` or until set."""
    end = time.time() + seconds
    while time.time() < end and not (until is not None and until.is_set()):
        for n, rack in RACKS.items():
            if n not in down:
                f = dataclasses.replace(frame(n, time.time()), rack=rack)
                producer.send(topic, encode(f), n.encode())
        producer.flush(10)
        time.sleep(0.25)


def alerts(db: Path) -> list[Alert]:
    store = SqliteStore(db, read_only=True)
    try:
        return [a for a in store.alerts(states=("pending", "firing", "resolved"))
                if a.rule in ("node_silent", "rack_silent")]
    finally:
        store.close()


def in_alertmanager(am: Server) -> dict[tuple[str, str], str]:
    url = (f"http://{am.address}/api/v2/alerts?filter="
           + urllib.parse.quote('cluster="c1"'))
    with urllib.request.urlopen(url, timeout=5) as r:
        return {(a["labels"]["alertname"], a["labels"].get("node", "")): a["status"]["state"]
                for a in json.load(r)}


def test_a_pdu_trip_is_one_rack_alert_over_its_nodes_alerts(kafka: Server,
                                                             tmp_path: Path) -> None:
    config = tmp_path / "alertmanager.yml"
    shutil.copy(CONFIG, config)
    am = alertmanager(tmp_path, config=config).start()
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 2)
    db = tmp_path / "store.db"
    store = SqliteStore(db)
    notifier = Notifier([AlertmanagerSink(f"http://{am.address}")], background=False,
                        record=store.write_notifications)
    processor = Processor(store, [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))],
                          notifier=notifier)
    consumer = KafkaConsumer(kafka.address, topic, f"processors-{run}", **FAST)
    stop = threading.Event()
    thread = threading.Thread(target=processor.run, args=(consumer, stop, 100), daemon=True)
    thread.start()
    producer = KafkaProducer(kafka.address)
    fired = threading.Event()
    try:
        wait_for(lambda: processor.ownership.owned, timeout_s=30)
        send(producer, topic, 3.0)
        # The PDU trips: a0..a2 stop, a3 and rack r2 send on until the rack alert fires.
        def rack_firing() -> bool:
            ok = any(a.rule == "rack_silent" and a.state == "firing" for a in alerts(db))
            if ok:
                fired.set()
            return ok
        sender = threading.Thread(target=send, args=(producer, topic, SILENT_MIN_S + 30,
                                                     TRIPPED, fired), daemon=True)
        sender.start()
        wait_for(rack_firing, timeout_s=SILENT_MIN_S + 25)
        wait_for(lambda: sum(a.rule == "node_silent" and a.state == "firing"
                             for a in alerts(db)) == len(TRIPPED), timeout_s=15)
        sender.join(40)
        down = alerts(db)
        time.sleep(2.0)  # anything posted has reached Alertmanager
        posted = in_alertmanager(am)
        send(producer, topic, 3.0)  # power is back: every node sends again
        wait_for(lambda: all(a.state == "resolved" for a in alerts(db)), timeout_s=20)
        back = alerts(db)
    finally:
        stop.set()
        thread.join(30)
        notifier.close()
        producer.close()
        am.stop()
    [rack] = [a for a in down if a.rule == "rack_silent"]
    assert (rack.rack, rack.node, rack.device, rack.severity) == ("r1", "", "rack:r1",
                                                                   "critical")
    assert rack.evidence["silent_nodes"] == 3 and rack.evidence["known_nodes"] == 4
    assert {k for k in rack.evidence if k.startswith("last_frame_ts.")} == {
        f"last_frame_ts.{n}" for n in TRIPPED}
    assert rack.evidence["last_frames_span_s"] <= 2.0
    assert all(n in rack.message for n in TRIPPED) and "PDU" in rack.action
    nodes = [a for a in down if a.rule == "node_silent"]
    assert sorted(a.node for a in nodes) == list(TRIPPED)
    # The store's record: each node_silent muted under the rack's alert, the rack's sent.
    record = SqliteStore(db, read_only=True)
    try:
        told = record.notifications(0, time.time() + 3600,
                                    [a.id for a in nodes] + [rack.id])
    finally:
        record.close()
    firing = {(n.rule, n.node): (n.outcome, n.muted_by) for n in told if n.state == "firing"}
    assert firing == {("rack_silent", ""): ("sent", ""),
                      **{("node_silent", n): ("muted", f"inhibited:{rack.id}") for n in TRIPPED}}
    assert posted == {("rack_silent", ""): "active"}
    # Back: one rack alert in all, resolved with the nodes' first frames.
    assert len({a.id for a in back if a.rule == "rack_silent"}) == 1
    assert all(a.state == "resolved" for a in back)


def test_a_rack_spread_over_two_members_is_one_rack_alert(kafka: Server,
                                                         tmp_path: Path) -> None:
    """Two processors share the topic's two partitions, and rack r1's nodes are spread
    over them (a0 in partition 0, a1..a3 in partition 1; r1's name maps to partition 0).
    Its judge (partition 0's member) raises one ``rack_silent`` on a0 and the other
    member's a1, a2 from the store; the other member raises none. Alertmanager, with the
    shipped inhibit rules, has the rack alert active and every node_silent suppressed
    under it. The nodes back, the rack alert is resolved: one rack alert in all."""
    config = tmp_path / "alertmanager.yml"
    shutil.copy(CONFIG, config)
    am = alertmanager(tmp_path, config=config).start()
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 2)
    db = tmp_path / "store.db"
    stores = [SqliteStore(db) for _ in range(2)]
    notifiers = [Notifier([AlertmanagerSink(f"http://{am.address}")], background=False,
                          record=s.write_notifications) for s in stores]
    members = [Processor(s, [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))],
                         notifier=n) for s, n in zip(stores, notifiers, strict=True)]
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(KafkaConsumer(
        kafka.address, topic, f"processors-{run}", **FAST), stop, 100), daemon=True)
        for p in members]
    for t in threads:
        t.start()
    producer = KafkaProducer(kafka.address)
    fired = threading.Event()
    try:
        wait_for(lambda: all(p.ownership.owned and len(p.ownership.owned) == 1
                             for p in members), timeout_s=60)
        send(producer, topic, 3.0)
        assert not any(p.ownership.whole() for p in members)
        [judge] = [p for p in members if p.racks.judges("c1", "r1")]
        [other] = [p for p in members if p is not judge]
        placed = {n: p for p in members for (_, n), _ in p.ownership.placement().items()}
        assert placed["a0"] is judge and {placed[n] for n in ("a1", "a2")} == {other}

        def rack_firing() -> bool:
            ok = any(a.rule == "rack_silent" and a.state == "firing" for a in alerts(db))
            if ok:
                fired.set()
            return ok
        sender = threading.Thread(target=send, args=(producer, topic, SILENT_MIN_S + 30,
                                                     TRIPPED, fired), daemon=True)
        sender.start()
        wait_for(rack_firing, timeout_s=SILENT_MIN_S + 25)
        wait_for(lambda: sum(a.rule == "node_silent" and a.state == "firing"
                             for a in alerts(db)) == len(TRIPPED), timeout_s=15)
        sender.join(40)
        time.sleep(3.0)  # a second rack alert (the other member's) would have come
        down = alerts(db)
        wait_for(lambda: in_alertmanager(am).get(("rack_silent", "")) == "active",
                 timeout_s=10)
        wait_for(lambda: all(s == "suppressed" for (rule, _), s in in_alertmanager(am).items()
                             if rule == "node_silent"), timeout_s=10)
        posted = in_alertmanager(am)
        send(producer, topic, 3.0)  # power is back: every node sends again
        wait_for(lambda: all(a.state == "resolved" for a in alerts(db)), timeout_s=20)
        back = alerts(db)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for n in notifiers:
            n.close()
        producer.close()
        for s in stores:
            s.close()
        am.stop()
    [rack] = [a for a in down if a.rule == "rack_silent"]
    assert (rack.rack, rack.device) == ("r1", "rack:r1")
    assert rack.evidence["silent_nodes"] == 3 and rack.evidence["known_nodes"] == 4
    assert {k for k in rack.evidence if k.startswith("last_frame_ts.")} == {
        f"last_frame_ts.{n}" for n in TRIPPED}
    assert sorted(a.node for a in down if a.rule == "node_silent") == list(TRIPPED)
    assert posted.get(("rack_silent", "")) == "active"
    assert {n for (rule, n), s in posted.items() if rule == "node_silent"} <= set(TRIPPED)
    assert all(s == "suppressed" for (rule, _), s in posted.items() if rule == "node_silent")
    # The judge's own silent node is muted under the rack alert in fleetwatch's record too.
    record = SqliteStore(db, read_only=True)
    try:
        told = record.notifications(0, time.time() + 3600, [a.id for a in down])
    finally:
        record.close()
    muted = {n.node: n.muted_by for n in told if n.state == "firing" and n.rule == "node_silent"}
    assert muted["a0"] == f"inhibited:{rack.id}"
    # Back: one rack alert in all, resolved; the other member never held it.
    assert len({a.id for a in back if a.rule == "rack_silent"}) == 1
    assert all(a.state == "resolved" for a in back)
    assert not [a for a in other.alerts.open if a.rule == "rack_silent"]
