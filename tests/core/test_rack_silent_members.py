"""With several members in a consumer group, a rack (``rack_silent``) is judged by one
member only: the one owning the partition its name maps to (``pipeline.rack_judges``), on
its own nodes and the others' last frames in the store; a member that is not the rack's
judge pages no rack, only its nodes. A processor reading every partition judges every rack.
Over the in-process bus, a real SQLite store and the processor's own loop; the consumer's
``partitions`` says what the topic holds, its ``partition_of`` where a key goes."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.bus import Partition
from fleetwatch.pipeline.bus.memory import MemoryConsumer
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import TOPIC
from tests.core.test_silent_takeover import run_until_stored, ticks

TRIPPED = ("a", "b", "c")


class OneOfTwo(MemoryConsumer):
    """A member whose topic has a second partition, another member's (holding no node of
    these tests: every node's frames come here)."""

    def partitions(self) -> frozenset[Partition]:
        return frozenset({(TOPIC, 0), (TOPIC, 1)})


class NotTheJudge(OneOfTwo):
    """A member of two whose rack r1 maps to the other member's partition."""

    def partition_of(self, key: bytes) -> Partition | None:
        return (TOPIC, 1) if key == b"r1" else (TOPIC, 0)


class Unknown(MemoryConsumer):
    """A consumer that cannot say which partitions its topic has."""

    def partitions(self) -> frozenset[Partition]:
        return frozenset()


def rack_alerts(db: Path) -> list[str]:
    store = SqliteStore(db, read_only=True)
    try:
        return sorted(f"{a.rule}/{a.node or a.device}" for a in store.alerts()
                      if a.rule in ("node_silent", "rack_silent"))
    finally:
        store.close()


def _trip(db: Path, consumer: type[MemoryConsumer]) -> list[str]:
    """Four nodes of rack r1; a, b, c stop together, d sends on for 3 min."""
    frames = ticks((*TRIPPED, "d"), 0, 6) + ticks(("d",), 6, 24)
    run_until_stored(db, frames, len(frames), consumer=consumer)
    return rack_alerts(db)


def test_a_processor_reading_every_partition_pages_the_rack(tmp_path: Path) -> None:
    assert _trip(tmp_path / "store.db", MemoryConsumer) == [
        "node_silent/a", "node_silent/b", "node_silent/c", "rack_silent/rack:r1"]


def test_one_of_several_members_judges_only_the_racks_that_map_to_its_partitions(
        tmp_path: Path) -> None:
    assert _trip(tmp_path / "one.db", OneOfTwo) == [
        "node_silent/a", "node_silent/b", "node_silent/c", "rack_silent/rack:r1"]
    assert _trip(tmp_path / "other.db", NotTheJudge) == [
        "node_silent/a", "node_silent/b", "node_silent/c"]
    assert _trip(tmp_path / "unknown.db", Unknown) == [
        "node_silent/a", "node_silent/b", "node_silent/c", "rack_silent/rack:r1"]


def test_whole_is_every_partition_of_the_topic_or_no_bus() -> None:
    ownership = Ownership(None, AlertBook())  # type: ignore[arg-type]  # no store read here
    assert ownership.whole()  # no bus (a replay): every node is its own
    ownership.assigned([(TOPIC, 0)])
    assert not ownership.whole()  # the topic's partitions not known
    ownership.partitions = lambda: {(TOPIC, 0), (TOPIC, 1)}
    assert not ownership.whole()
    ownership.assigned([(TOPIC, 1)])
    assert ownership.whole()
    ownership.revoked([(TOPIC, 1)])
    assert not ownership.whole()
