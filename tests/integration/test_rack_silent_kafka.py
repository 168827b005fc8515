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


def test_two_members_of_a_group_judge_no_rack_and_page_each_node(kafka: Server,
                                                                 tmp_path: Path) -> None:
    """Two processors share the topic's two partitions: each sees some nodes of the rack,
    so neither judges it: the tripped nodes page on their own, as before rack_silent
    existed. (Judged on its part, the member reading a1, a2 and a3 paged "2 of its 3 nodes"
    of a rack of 4, naming two of the three nodes down; the same on a rack of 8 would page
    3 of a member's 4 as a rack where 3 of 8 is none.)"""
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 2)
    db = tmp_path / "store.db"
    members = [Processor(SqliteStore(db), [NodeSilence(DetectorsConfig(
        silent_min_s=SILENT_MIN_S))]) for _ in range(2)]
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(KafkaConsumer(
        kafka.address, topic, f"processors-{run}", **FAST), stop, 100), daemon=True)
        for p in members]
    for t in threads:
        t.start()
    producer = KafkaProducer(kafka.address)
    try:
        wait_for(lambda: all(p.ownership.owned and len(p.ownership.owned) == 1
                             for p in members), timeout_s=60)
        send(producer, topic, 3.0)
        assert not any(p.ownership.whole() for p in members)
        done = threading.Event()
        sender = threading.Thread(target=send, args=(producer, topic, SILENT_MIN_S + 30,
                                                     TRIPPED, done), daemon=True)
        sender.start()
        wait_for(lambda: sum(a.rule == "node_silent" and a.state == "firing"
                             for a in alerts(db)) == len(TRIPPED), timeout_s=SILENT_MIN_S + 25)
        time.sleep(3.0)  # a rack alert would have come with the nodes' own
        done.set()
        sender.join(40)
        found = alerts(db)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        producer.close()
        for p in members:
            p.store.close()
    assert sorted(a.node for a in found if a.rule == "node_silent") == list(TRIPPED)
    assert [a for a in found if a.rule == "rack_silent"] == []
