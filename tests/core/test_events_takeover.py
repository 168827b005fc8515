"""A node taken over by another processor (a rebalance, a restart) starts from the GPU
states the store holds: a GPU still lost is not stored as lost again at each takeover,
and one that came back while no processor watched it is stored as back."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.pipeline.events import EventTracker
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_events import frame, gpu


def states(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.device, e.value) for e in sorted(events, key=lambda e: e.ts)
            if e.kind == "gpu_state"]


def test_a_tracker_starts_from_the_recalled_states() -> None:
    stored = [Event(ts=5.0, kind="gpu_state", cluster="c", rack="rack-0", node="node-0",
                    device="gpu1", value="lost")]
    t = EventTracker()
    t.recall([("c", "node-0")], stored)
    assert states(t.update([frame(10, gpu(0), gpu(1, state="lost"))])) == []
    assert states(t.update([frame(11, gpu(0), gpu(1))])) == [("gpu1", "ok")]
    fresh = EventTracker()  # nothing stored: a GPU first seen lost is an event, as before
    assert states(fresh.update([frame(10, gpu(0), gpu(1, state="lost"))])) == [
        ("gpu1", "lost")]
    back = EventTracker()   # lost when stored, fine now: it came back meanwhile
    back.recall([("c", "node-0")], stored)
    assert states(back.update([frame(10, gpu(0), gpu(1))])) == [("gpu1", "ok")]


def test_three_takeovers_store_one_loss(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    t0 = round(time.time()) - 3600.0  # within the store's retention
    for owner in range(4):  # the first owner, then three takeovers by new processors
        p = Processor(store)
        p.process([frame(t0 + 10 * owner + k, gpu(0), gpu(2, state="lost" if owner or k >= 3
                                                             else "ok"))
                   for k in range(5)])
    p.process([frame(t0 + 100, gpu(0), gpu(2))])
    assert states(store.events(0, 2e9)) == [("gpu2", "lost"), ("gpu2", "ok")]
    store.close()
