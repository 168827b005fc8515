"""With several members, a rack's ``rack_silent`` alert is its judge's: the member owning
the partition its name maps to. A rebalance that moves that partition hands the open alert
over: the old judge lets it go (its book, its notifier: no longer re-sent from there), the
new one takes it over from the store (and resolves it when the rack is up), so one member
carries it across the rebalance, neither two nor none. Over a real SQLite store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.bus import Partition
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.rack_judges import RackJudges
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import T0, TOPIC, frame

P0, P1 = (TOPIC, 0), (TOPIC, 1)
WHERE = {b"r1": P0, b"a": P0, b"b": P1}  # rack r1 maps to partition 0


def rack_alert() -> Alert:
    return Alert(id=f"rack_silent/c1//rack:r1/{int(T0 * 1000)}", rule="rack_silent",
                 severity="critical", cluster="c1", rack="r1", node="", device="rack:r1",
                 state="firing", started_ts=T0, updated_ts=T0, value=3.0,
                 message="Rack r1: 3 of its 4 nodes stopped sending together",
                 fired_ts=T0)


class Member:
    def __init__(self, store: SqliteStore) -> None:
        self.book = AlertBook()
        self.let_go: list[str] = []
        self.loaded: list[str] = []
        self.ownership = Ownership(store, self.book,
                                   on_loaded=[lambda a: self.loaded.extend(x.id for x in a)],
                                   on_let_go=[lambda a: self.let_go.extend(x.id for x in a)])
        self.ownership.locate = lambda key: WHERE.get(key, P1)
        self.ownership.partitions = lambda: {P0, P1}
        self.ownership.judges = RackJudges(store, self.ownership, []).judges

    def racks(self) -> list[str]:
        return [a.id for a in self.book.open if a.rule == "rack_silent"]

    def assign(self, revoked: list[Partition], assigned: list[Partition],
               node: str) -> None:
        if revoked:
            self.ownership.revoked(revoked)
        self.ownership.assigned(assigned)
        f = frame(node, T0 + 10.0)
        self.ownership.build([f], None)


def test_a_rebalance_hands_the_rack_alert_to_the_racks_new_judge(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    try:
        store.write_alerts([rack_alert()])
        judge, other = Member(store), Member(store)
        judge.assign([], [P0], "a")
        other.assign([], [P1], "b")
        assert judge.racks() == [rack_alert().id] and other.racks() == []
        # The partitions swap: r1's alert goes with partition 0.
        judge.assign([P0], [P1], "b")
        other.assign([P1], [P0], "a")
        assert judge.racks() == [] and judge.let_go == [rack_alert().id]
        assert other.racks() == [rack_alert().id] and other.loaded == [rack_alert().id]
        # Assigned again the same partition: nothing moves, nothing loaded twice.
        other.assign([], [P0], "a")
        assert other.racks() == [rack_alert().id] and other.loaded == [rack_alert().id]
    finally:
        store.close()


def test_a_member_left_alone_takes_every_rack_alert_over(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    try:
        store.write_alerts([rack_alert()])
        other = Member(store)
        other.assign([], [P1], "b")
        assert other.racks() == []
        other.assign([], [P0], "a")  # the judge left the group: every partition is its own
        assert other.ownership.whole() and other.racks() == [rack_alert().id]
    finally:
        store.close()


def test_a_rack_alert_whose_partition_is_not_known_yet_is_taken_over_once_it_is(
        tmp_path: Path) -> None:
    """Right after an assignment the topic's size may not be known yet: no member can say
    whose a rack is, so the take-over is tried again at the next batch, not given up."""
    store = SqliteStore(tmp_path / "store.db")
    try:
        store.write_alerts([rack_alert()])
        judge = Member(store)
        known = [False]
        judge.ownership.locate = lambda key: WHERE.get(key, P1) if known[0] else None
        judge.assign([], [P0], "a")
        assert judge.racks() == []
        known[0] = True
        judge.ownership.build([frame("a", T0 + 20.0)], None)
        assert judge.racks() == [rack_alert().id]
    finally:
        store.close()


def test_a_member_that_never_had_a_frame_takes_over_only_a_named_clusters_rack_alert(
        tmp_path: Path) -> None:
    """A small fleet: the member that joins gets the rack's partition but none of the
    nodes' (they all map to the other member's), so it never has a frame to learn its
    cluster from. Its configuration naming the cluster (``alerts.clusters``, or
    ``node.cluster`` set), it takes the rack alert over; naming none, it takes nothing:
    the store's one cluster may be another deployment's, sharing only the store (before,
    it took it over, resolved it, then paged that deployment's racks to its own webhook)."""
    store = SqliteStore(tmp_path / "store.db")
    try:
        store.write_alerts([rack_alert()])  # of cluster c1, the store's only one
        for named, taken in ((frozenset(), []), (frozenset({"c1"}), [rack_alert().id])):
            fresh = Member(store)
            fresh.ownership.named = named
            fresh.ownership.assigned([P0])
            fresh.ownership.build([], None)  # a tick: no frame
            assert fresh.racks() == taken and fresh.loaded == taken
    finally:
        store.close()


def test_a_member_without_frames_takes_nothing_over_from_a_store_of_several_clusters(
        tmp_path: Path) -> None:
    """Several clusters in one store (each consumed by its own processors): a member that
    had no frame cannot tell which is its own, so it takes no rack alert over."""
    store = SqliteStore(tmp_path / "store.db")
    try:
        other = replace(rack_alert(), id=rack_alert().id.replace("c1", "c2"), cluster="c2")
        store.write_alerts([rack_alert(), other])
        fresh = Member(store)
        fresh.ownership.assigned([P0])
        fresh.ownership.build([], None)
        assert fresh.racks() == []
    finally:
        store.close()


def test_a_member_takes_over_the_rack_alert_of_a_cluster_its_configuration_names(
        tmp_path: Path) -> None:
    """A small cluster whose nodes all map to the other member's partitions: the judge of
    its rack has frames of another cluster only. Its configuration naming the small
    cluster as the deployment's (``Ownership.named``), the rack's open alert is its own;
    not named, the cluster may be another deployment's sharing the store: left alone."""
    store = SqliteStore(tmp_path / "store.db")
    try:
        store.write_alerts([rack_alert()])  # of cluster c1
        for named, taken in ((frozenset(), []), (frozenset({"c1", "c2"}), [rack_alert().id])):
            judge = Member(store)
            judge.ownership.named = named
            judge.ownership.assigned([P0])
            judge.ownership.build([replace(frame("a", T0 + 10.0), cluster="c2")], None)
            assert judge.racks() == taken
    finally:
        store.close()


def test_the_deployments_clusters_are_its_own_and_those_its_alerts_name() -> None:
    """``node.cluster`` is the deployment's where the configuration sets it; left at its
    default (an agent's setting a processor's file may leave out) it names no cluster:
    "default" may be another deployment's sharing the store, whose racks this one then
    judged and paged."""
    import dataclasses

    from fleetwatch.config import Config, load
    from fleetwatch.wiring import deployment_clusters

    c = Config()
    assert deployment_clusters(c) == []
    c = dataclasses.replace(c, node=dataclasses.replace(c.node, cluster="train-a"),
                            alerts=dataclasses.replace(c.alerts, clusters=("inf-b", "train-a")))
    assert deployment_clusters(c) == ["inf-b", "train-a"]
    assert deployment_clusters(load(env={})) == []
    assert deployment_clusters(load(env={"FLEETWATCH_NODE_CLUSTER": "east"})) == ["east"]
    assert deployment_clusters(load(env={"FLEETWATCH_ALERTS_CLUSTERS": "b,a"})) == ["a", "b"]
