"""What a rack's judge asks of the store (``pipeline.rack_judges``): a week's nodes once, at
an assignment, then only the last minutes each period, so that an idle member's cost does
not grow with the history the store holds; the nodes it learns are merged, and leave after
``EXPECT_S`` unheard."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.rack_silence import Remote
from fleetwatch.pipeline.rack_judges import (
    FULL_EVERY_S,
    RECENT_S,
    SETTLED_RETRY_S,
    RackJudges,
)
from fleetwatch.pipeline.store.base import Point, SeriesKey
from fleetwatch.pipeline.stored_nodes import EXPECT_S, SEEN_METRICS

T0 = 1_800_000_000.0


class Sharer:
    c = DetectorsConfig(silent_min_s=40.0)  # read every 5 s

    def __init__(self) -> None:
        self.told: list[list[Remote] | None] = []

    def share(self, judges: Callable[[str, str], bool],
              remote: Sequence[Remote] | None, clusters: Collection[str] = (),
              window: float | None = None) -> None:
        self.told.append(None if remote is None else list(remote))


class Owner:
    def __init__(self) -> None:
        self.owned = {("t", 0)}
        # The consumer's: which of the other members' partitions are stored to their end.
        self.settled: Callable[[Collection[tuple[str, int]]],
                               Collection[tuple[str, int]] | None] | None = None

    @staticmethod
    def partitions() -> set[tuple[str, int]]:
        return {("t", 0), ("t", 1)}

    @staticmethod
    def locate(key: bytes) -> tuple[str, int]:
        return ("t", 0)

    def whole(self) -> bool:
        return False


class Recorder:
    """A store that records each read's span (start, end) in seconds and answers from
    ``newest``: node -> its newest sample's time."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.spans: list[tuple[float, float]] = []
        self.newest: dict[str, float] = {}

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        if metric == SEEN_METRICS[0]:  # one span a read, not one a metric
            self.spans.append((since_ms / 1000, self.clock()))
        if metric not in SEEN_METRICS:
            return []
        return [(SeriesKey(metric, "c", "rack-0", node, "host"), int(ts * 1000), 1.0)
                for node, ts in self.newest.items() if ts * 1000 >= since_ms]


def _judge() -> tuple[RackJudges, Recorder, Sharer, Owner, list[float]]:
    ticks = [0.0]
    store = Recorder(lambda: T0 + ticks[0])
    sharer, owner = Sharer(), Owner()
    judges = RackJudges(store, owner, [sharer],  # type: ignore[arg-type]
                        clock=lambda: T0 + ticks[0], monotonic=lambda: ticks[0])
    return judges, store, sharer, owner, ticks


def _run(judges: RackJudges, ticks: list[float], seconds: int) -> None:
    for _ in range(seconds):
        ticks[0] += 1.0
        judges.feed()


def test_ten_minutes_read_a_week_once_then_only_the_last_minutes() -> None:
    judges, store, sharer, _, ticks = _judge()
    store.newest = {"node-0": T0 - 3 * 86400.0}  # heard three days ago
    judges.feed()
    _run(judges, ticks, 600)
    weeks = [s for s in store.spans if s[1] - s[0] >= EXPECT_S]
    assert len(weeks) == 1
    assert len(store.spans) == 1 + 600 // 5
    assert all(end - start <= RECENT_S + judges.every_s for start, end in store.spans[1:])
    # the node read at the start is still known, though no short read finds it
    assert {r.node for r in sharer.told[-1] or ()} == {"node-0"}


def test_a_node_learned_from_a_short_read_is_merged_and_leaves_after_a_week() -> None:
    judges, store, sharer, _, ticks = _judge()
    judges.feed()
    assert sharer.told[-1] == []
    store.newest = {"node-1": T0 + 10.0}
    _run(judges, ticks, 20)
    assert sharer.told[-1] == [Remote("c", "rack-0", "node-1", T0 + 10.0, lane=("t", 0))]
    ticks[0] = EXPECT_S - 30.0  # a week later, the node unheard since
    _run(judges, ticks, 10)
    assert sharer.told[-1] == [Remote("c", "rack-0", "node-1", T0 + 10.0, lane=("t", 0))]
    _run(judges, ticks, 40)
    assert sharer.told[-1] == []
    assert sum(end - start >= EXPECT_S for start, end in store.spans) <= 2  # + FULL_EVERY_S


def test_a_rebalance_reads_the_week_again() -> None:
    judges, store, _, owner, ticks = _judge()
    judges.feed()
    _run(judges, ticks, 60)
    owner.owned = {("t", 0), ("t", 1)}
    _run(judges, ticks, 60)
    assert sum(end - start >= EXPECT_S for start, end in store.spans) == 2


def test_a_failed_read_is_made_up_by_the_next_one() -> None:
    """After a store away, the next short read covers the time it missed (a node first
    heard then is not lost), not only the last ``RECENT_S``."""
    judges, store, _, _, ticks = _judge()
    judges.feed()
    good = store.latest
    store.latest = lambda m, s: (_ for _ in ()).throw(OSError("away"))  # type: ignore[method-assign]
    _run(judges, ticks, 300)
    store.latest = good  # type: ignore[method-assign]
    _run(judges, ticks, 5)
    start, end = store.spans[-1]
    assert end - start >= 300.0 and end - start < FULL_EVERY_S


def test_the_other_members_nodes_of_a_partition_stored_to_its_end_are_said_settled() -> None:
    """Asked before each read of the store (what the group committed is stored); where the
    brokers do not say (None), asked again only ``SETTLED_RETRY_S`` later, each ask holding
    the member's frames meanwhile."""
    judges, store, sharer, owner, ticks = _judge()
    owner.locate = lambda key: ("t", 1) if key.startswith(b"x") else ("t", 0)  # type: ignore
    asked: list[set[tuple[str, int]]] = []
    answers: list[set[tuple[str, int]] | None] = [{("t", 1)}, None, set()]

    def settled(partitions: Collection[tuple[str, int]]) -> set[tuple[str, int]] | None:
        asked.append(set(partitions))
        return answers.pop(0)
    owner.settled = settled
    store.newest = {"x1": T0 - 60.0, "y1": T0 - 60.0}
    judges.feed()
    assert asked == [{("t", 1)}]  # the other members' partitions only
    assert {(r.node, r.settled) for r in sharer.told[-1] or []} == {("x1", True),
                                                                   ("y1", False)}
    _run(judges, ticks, 5)  # the brokers do not say: none settled
    assert len(asked) == 2 and not any(r.settled for r in sharer.told[-1] or [])
    _run(judges, ticks, int(SETTLED_RETRY_S) - 5)
    assert len(asked) == 2  # not asked again meanwhile
    _run(judges, ticks, 5)
    assert len(asked) == 3
