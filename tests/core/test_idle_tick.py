"""When no frame reaches the processor (a one-node deployment whose node went away, or a
whole cluster cut off from the brokers), time passes only through ``tick``: the node_silent
alert it fires must leave the same record as one fired by a batch, its ``node_state``
event stored and its page's outcome (``sent``) recorded as the lane reports it, not at the
next frame (a processor restarted before that re-paged it)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node
from tests.sinks.conftest import until
from tests.sinks.test_sink_lanes import alert


class Webhook:
    """A notifying sink that takes every page."""

    name, notify_only, timeout_s = "webhook", True, 1.0

    def __init__(self) -> None:
        self.got: list[str] = []

    def send(self, changes: Sequence[Notice]) -> bool:
        self.got += [n.alert.id for n in changes]
        return True

    def close(self) -> None:
        pass


def _tick(p: Processor, clock: list[float], at: float) -> None:
    clock[0] = at
    p._next_tick = 0.0  # as if TICK_EVERY_S had passed
    p.tick()


def test_a_node_silent_fired_while_no_frame_comes_is_stored_and_its_page_recorded_sent(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fw.db")
    sink = Webhook()
    notifier = Notifier([sink], record=store.write_notifications)
    clock = [1_000.0]
    p = Processor(store, detectors=[NodeSilence()], keep_firing_s=300.0,
                  notifier=notifier, clock=lambda: clock[0])
    try:
        for k in range(12):                    # the only node, every 5 s, then nothing
            clock[0] = 1_000.0 + 5 * k
            p.process([node(clock[0], [busy(60)], name="n1")])
        t = clock[0]
        while not p.alerts.open and t < 1_300:  # polls bring nothing: time passes by tick
            t += 5
            _tick(p, clock, t)
        assert until(lambda: sink.got) and sink.got[0].startswith("node_silent/"), sink.got
        fired = t
        # The lane reports; at the next ticks (no frame, no change) it is on record.
        def recorded() -> list[str]:
            _tick(p, clock, fired)  # the same time: no alert change
            time.sleep(0.05)
            return sorted(n.outcome for n in store.notifications(0, 1e12))

        assert until(lambda: recorded() == ["queued", "sent"]), recorded()
        events = [(e.node, e.value, e.ts) for e in store.events(0, 1e12, kinds=["node_state"])]
        assert [(n, v) for n, v, _ in events] == [("n1", "silent")], events
        assert 1_055 + 55 <= events[0][2] <= fired, events
        # the node back: its first frame writes "back"
        clock[0] = fired + 20
        p.process([node(clock[0], [busy(60)], name="n1")])
        values = [e.value for e in store.events(0, 1e12, kinds=["node_state"])]
        assert values == ["silent", "back"], values
    finally:
        notifier.close()
        store.close()


class EventsAwayOnce(SqliteStore):
    """A store away for one events write, once ``away`` is set."""

    away = False

    def write_events(self, events):  # type: ignore[no-untyped-def,override]
        if self.away:
            self.away = False
            raise StoreError("store away (test)")
        super().write_events(events)


def test_a_node_silent_event_the_store_was_away_for_is_written_at_the_next_tick(
        tmp_path: Path) -> None:
    store = EventsAwayOnce(tmp_path / "fw.db")
    clock = [1_000.0]
    p = Processor(store, detectors=[NodeSilence()], keep_firing_s=300.0,
                  clock=lambda: clock[0])
    try:
        for k in range(12):
            clock[0] = 1_000.0 + 5 * k
            p.process([node(clock[0], [busy(60)], name="n1")])
        t = clock[0]
        store.away = True
        with pytest.raises(StoreError):
            while not p.alerts.open and t < 1_300:
                t += 5
                _tick(p, clock, t)
        assert [a.rule for a in p.alerts.open] == ["node_silent"]  # fired all the same
        assert store.events(0, 1e12, kinds=["node_state"]) == []
        _tick(p, clock, t + 1)                 # the store back, still no frame
        assert [(e.node, e.value) for e in store.events(0, 1e12, kinds=["node_state"])] == [
            ("n1", "silent")]
        _tick(p, clock, t + 2)                 # written once
        assert len(store.events(0, 1e12, kinds=["node_state"])) == 1
        assert p.stats.events.get("node_state") == 1
    finally:
        store.close()


def test_a_page_delivered_while_the_brokers_are_away_is_recorded_sent(tmp_path: Path) -> None:
    """The brokers do not answer (``deaf``): no tick judges silence, but the lanes'
    outcomes are recorded all the same."""
    store = SqliteStore(tmp_path / "fw.db")
    sink = Webhook()
    notifier = Notifier([sink], record=store.write_notifications)
    p = Processor(store, detectors=[NodeSilence()], notifier=notifier)
    try:
        notifier.send([alert("hot")], now=1_000)  # paged by a batch just before
        assert until(lambda: sink.got)

        def recorded() -> list[str]:
            p.deaf()
            time.sleep(0.05)
            return sorted(n.outcome for n in store.notifications(0, 1e12))

        assert until(lambda: recorded() == ["queued", "sent"]), recorded()
    finally:
        notifier.close()
        store.close()
