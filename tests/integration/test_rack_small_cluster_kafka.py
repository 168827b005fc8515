"""Small fleets over two processors, with a real broker and store: a rack whose nodes all
map to one member's partitions while its name maps to the other's, the rack's judge.

The two processors are members of one consumer group on a topic of two partitions. Cluster
``big`` has nodes in both partitions; cluster ``small`` is one rack, ``r-small``, whose three
nodes all map to partition 1, while the rack's own name maps to partition 0: the member
reading partition 0 is the rack's judge (``pipeline.rack_judges``) and has never had a frame
of ``small``. The rack loses power: the judge raises one ``rack_silent`` (its cluster is
named by the processors' configuration, as the deployment's), the other member pages the
three nodes; power back, the rack alert resolves. Before, the judge judged only clusters it
had had frames from: no rack alert at all, three node pages that nothing muted.

And where that rack's nodes are all the other member has (one cluster): they stop, and so
does every frame of that member. The judge judged the other members' nodes at the newest
frame of theirs it had read (so that a member catching up a backlog makes no live rack
silent): that stopped with them, and the rack was never judged down. Their partition's
offsets committed by the group up to its end (every frame of it stored), they are judged at
the judge's own time."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import frame, wait_for
from tests.integration.test_rack_silent_kafka import FAST, SILENT_MIN_S, alerts
from tests.integration.test_rebalance_alerts import partition_of
from tests.servers import Server

pytestmark = pytest.mark.kafka
# (cluster, rack) of each node; the partitions its name maps to (of 2) are checked below.
NODES = {"b0": ("big", "rb"), "b1": ("big", "rb"), "b2": ("big", "rb"), "b3": ("big", "rb"),
         "s1": ("small", "r-small"), "s2": ("small", "r-small"), "s3": ("small", "r-small")}
SMALL = ("s1", "s2", "s3")


def send(producer: KafkaProducer, topic: str, seconds: float, down: tuple[str, ...] = (),
         until: threading.Event | None = None,
         nodes: dict[str, tuple[str, str]] = NODES) -> None:
    """Every node but ``down`` sends a frame every 0.25 s, for ``seconds`` or until set."""
    end = time.time() + seconds
    while time.time() < end and not (until is not None and until.is_set()):
        for n, (cluster, rack) in nodes.items():
            if n not in down:
                f = dataclasses.replace(frame(n, time.time()), cluster=cluster, rack=rack)
                producer.send(topic, encode(f), n.encode())
        producer.flush(10)
        time.sleep(0.25)


def _trip(kafka: Server, tmp_path: Path, nodes: dict[str, tuple[str, str]],
          tripped: tuple[str, ...], clusters: tuple[str, ...]) -> dict[str, object]:
    """Two members; every node sends, then ``tripped`` stop until a rack alert is stored
    (or for a while), then all send again until every alert resolves."""
    run = uuid.uuid4().hex[:8]
    topic = f"frames-{run}"
    ensure_topic(kafka.address, topic, 2)
    db = tmp_path / "store.db"
    stores = [SqliteStore(db) for _ in range(2)]
    # Both members' configuration names the deployment's clusters (node.cluster where set,
    # and alerts.clusters, as process_service passes them: wiring.deployment_clusters).
    members = [Processor(s, [NodeSilence(DetectorsConfig(silent_min_s=SILENT_MIN_S))],
                         clusters=clusters) for s in stores]
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(KafkaConsumer(
        kafka.address, topic, f"processors-{run}", **FAST), stop, 100), daemon=True)
        for p in members]
    for t in threads:
        t.start()
    producer = KafkaProducer(kafka.address)
    fired = threading.Event()
    out: dict[str, object] = {}
    try:
        wait_for(lambda: all(p.ownership.owned and len(p.ownership.owned) == 1
                             for p in members), timeout_s=60)
        send(producer, topic, 3.0, nodes=nodes)
        cluster, rack = nodes[tripped[0]]
        [judge] = [p for p in members if p.racks.judges(cluster, rack)]
        [other] = [p for p in members if p is not judge]
        placed = {n: p for p in members for (_, n), _ in p.ownership.placement().items()}
        out["placed"] = {n: p is judge for n, p in placed.items()}

        def rack_firing() -> bool:
            ok = any(a.rule == "rack_silent" and a.state == "firing" for a in alerts(db))
            if ok:
                fired.set()
            return ok
        # The rack loses power; the rest of the fleet sends on.
        sender = threading.Thread(target=send, args=(producer, topic, SILENT_MIN_S + 30,
                                                     tripped, fired, nodes), daemon=True)
        sender.start()
        wait_for(lambda: sum(a.rule == "node_silent" and a.state == "firing"
                             for a in alerts(db)) == len(tripped), timeout_s=SILENT_MIN_S + 25)
        try:
            wait_for(rack_firing, timeout_s=15)
        except AssertionError:
            fired.set()
        sender.join(40)
        out["down"] = alerts(db)
        out["books"] = [(p is judge, a.rule) for p in members for a in p.alerts.open
                        if a.rule == "rack_silent"]
        send(producer, topic, 3.0, nodes=nodes)  # power back
        wait_for(lambda: all(a.state == "resolved" for a in alerts(db)), timeout_s=20)
        out["back"] = alerts(db)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        producer.close()
        for s in stores:
            s.close()
    return out


def test_a_small_clusters_rack_is_judged_by_a_member_with_no_frame_of_it(
        kafka: Server, tmp_path: Path) -> None:
    assert partition_of("r-small") == 0 and {partition_of(n) for n in SMALL} == {1}
    assert {partition_of(n) for n in NODES if n not in SMALL} == {0, 1}
    out = _trip(kafka, tmp_path, NODES, SMALL, ("big", "small"))
    placed = out["placed"]
    assert not any(placed[n] for n in SMALL)  # every node of the small cluster: the other's
    _is_one_rack_alert(out, "small", SMALL)


def test_a_rack_that_is_all_the_other_member_reads_is_judged_when_it_stops(
        kafka: Server, tmp_path: Path) -> None:
    nodes = {"b0": ("c1", "rb"), "b2": ("c1", "rb"),
             "s1": ("c1", "r-small"), "s2": ("c1", "r-small"), "s3": ("c1", "r-small")}
    assert {partition_of(n) for n in ("b0", "b2")} == {0}
    out = _trip(kafka, tmp_path, nodes, SMALL, ("c1",))
    assert out["placed"] == {"b0": True, "b2": True, "s1": False, "s2": False, "s3": False}
    _is_one_rack_alert(out, "c1", SMALL)


def _is_one_rack_alert(out: dict, cluster: str, tripped: tuple[str, ...]) -> None:
    down, back = out["down"], out["back"]
    [rack] = [a for a in down if a.rule == "rack_silent"]
    assert (rack.cluster, rack.rack, rack.device) == (cluster, "r-small", "rack:r-small")
    assert rack.evidence["silent_nodes"] == 3 and rack.evidence["known_nodes"] == 3
    assert out["books"] == [(True, "rack_silent")]  # raised by the judge alone
    assert sorted(a.node for a in down if a.rule == "node_silent") == list(tripped)
    assert len({a.id for a in back if a.rule == "rack_silent"}) == 1
