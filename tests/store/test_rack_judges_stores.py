"""A rack's judge (several processors in a group: ``pipeline.rack_judges``) reads the other
members' nodes of its racks from the store: each node's rack and newest frame time, on
every backend, the newest kept across the short reads between two full ones; a store that
cannot be read says so (None), so that the racks' last findings are held."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import AGENT_STOPPED, HostReading
from fleetwatch.models.rack_silence import Remote
from fleetwatch.pipeline.rack_judges import RackJudges
from fleetwatch.pipeline.store.base import StoreError
from tests.store.backends import Backend
from tests.store.helpers import cluster_name, frames, minute_ago


class Sharer:
    """A detector that judges racks with several members: what it is told."""

    c = DetectorsConfig(silent_min_s=8.0)

    def __init__(self) -> None:
        self.told: list[list[Remote] | None] = []
        self.judges: Callable[[str, str], bool] | None = None

    def share(self, judges: Callable[[str, str], bool],
              remote: Sequence[Remote] | None, clusters: Collection[str] = (),
              window: float | None = None) -> None:
        self.judges = judges
        self.told.append(None if remote is None else list(remote))


class OneOfTwo:
    """The ownership of a member holding partition 0 of two; rack-0 maps to it."""

    owned = {("t", 0)}

    @staticmethod
    def partitions() -> set[tuple[str, int]]:
        return {("t", 0), ("t", 1)}

    @staticmethod
    def locate(key: bytes) -> tuple[str, int]:
        return ("t", 0) if key == b"rack-0" else ("t", 1)

    def whole(self) -> bool:
        return False


class Away:
    def latest(self, metric: str, since_ms: int) -> list[object]:
        raise StoreError("the store is away")


def test_a_judge_reads_its_racks_nodes_from_every_backend(backend: Backend) -> None:  # noqa: F811
    cluster, t0 = cluster_name(), minute_ago(30)
    backend.store.write(frames(cluster, t0, 5))
    backend.settle()
    clock, ticks = [t0 / 1000 + 10.0], [0.0]
    sharer = Sharer()
    judges = RackJudges(backend.store, OneOfTwo(), [sharer],  # type: ignore[arg-type]
                        clock=lambda: clock[0], monotonic=lambda: ticks[0])
    assert judges.every_s == 1.0  # silent_min_s / 8
    judges.feed()
    mine = {r for r in sharer.told[-1] or () if r.cluster == cluster}
    assert mine == {Remote(cluster, "rack-0", "node-0", t0 / 1000 + 4, lane=("t", 1)),
                    Remote(cluster, "rack-0", "node-1", t0 / 1000 + 4, lane=("t", 1))}
    assert sharer.judges is not None and sharer.judges(cluster, "rack-0")
    assert not sharer.judges(cluster, "rack-1")
    judges.feed()  # within every_s: not read again
    assert len(sharer.told) == 1
    # Later frames, read by a short read (the last RECENT_S only): newer times kept.
    backend.store.write(frames(cluster, t0 + 20_000, 2))
    backend.settle()
    clock[0], ticks[0] = t0 / 1000 + 30.0, 5.0
    judges.feed()
    mine = {r for r in sharer.told[-1] or () if r.cluster == cluster}
    assert mine == {Remote(cluster, "rack-0", "node-0", t0 / 1000 + 21, lane=("t", 1)),
                    Remote(cluster, "rack-0", "node-1", t0 / 1000 + 21, lane=("t", 1))}


def test_a_node_whose_agent_stopped_cleanly_is_left_out(backend: Backend) -> None:  # noqa: F811
    """A scale-down's nodes (their last frame says their agent stopped) are not silent,
    nor counted in their rack, as the judge's own are not; one that sends again is back."""
    cluster, t0 = cluster_name(), minute_ago(30)
    batch = frames(cluster, t0, 5)
    last = batch[-1]
    assert last.node == "node-1"
    batch[-1] = dataclasses.replace(last, host=HostReading({**last.host.metrics,
                                                            AGENT_STOPPED: 1.0}))
    backend.store.write(batch)
    backend.settle()
    clock, ticks = [t0 / 1000 + 10.0], [0.0]
    sharer = Sharer()
    judges = RackJudges(backend.store, OneOfTwo(), [sharer],  # type: ignore[arg-type]
                        clock=lambda: clock[0], monotonic=lambda: ticks[0])
    judges.feed()
    assert {r.node for r in sharer.told[-1] or () if r.cluster == cluster} == {"node-0"}
    backend.store.write(frames(cluster, t0 + 20_000, 1))  # started again
    backend.settle()
    clock[0], ticks[0] = t0 / 1000 + 30.0, 5.0
    judges.feed()
    assert {r.node for r in sharer.told[-1] or () if r.cluster == cluster} == {"node-0",
                                                                                "node-1"}


def test_a_store_that_cannot_be_read_is_told_as_none() -> None:
    sharer = Sharer()
    RackJudges(Away(), OneOfTwo(), [sharer]).feed()  # type: ignore[arg-type]
    assert sharer.told == [None]
