"""A rack's power back, and the processor restarted within ``RECOVERY_HOLD_S`` of its
``rack_silent`` resolving: a node alert un-muted then, held by the processor before, is
held by the one taking over until the hold ends (from the recorded resolution), as
without a restart: one back by then is not posted at all, one still down is paged once
the hold passed. A real webhook and SQLite store, across the restart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.news import RECOVERY_HOLD_S
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.wiring import _recorded
from tests.sinks.conftest import tmp_store
from tests.sinks.test_sink_lanes import Hook, hook

__all__ = ["hook"]  # the fixture, used by name

T = 1_000_000.0
RACK = Alert("rack_silent/c//rack:r1/1000", "rack_silent", "critical", "c", "r1", "",
             "rack:r1", "firing", T, T, 3.0, "Rack r1: 3 of its 3 nodes", fired_ts=T)


def _node(name: str) -> Alert:
    return Alert(f"node_silent/c/{name}/host/1000", "node_silent", "critical", "c", "r1",
                 name, "host", "firing", T, T, 60.0, f"{name} has sent nothing",
                 fired_ts=T)


def _end(a: Alert, ts: float) -> Alert:
    return replace(a, state="resolved", updated_ts=ts, resolved_ts=ts)


def _notifier(hook: Hook, store: object) -> Notifier:
    return Notifier([WebhookSink(hook.url, timeout_s=5)], background=False,
                    record=store.write_notifications,  # type: ignore[attr-defined]
                    recorded=_recorded(store))  # type: ignore[arg-type]


def _posted(hook: Hook) -> list[tuple[str, str]]:
    return [(a["labels"].get("node") or a["labels"].get("device"), a["state"])
            for b in hook.bodies for g in b["groups"] for a in g["alerts"]]


def _restarted_within_the_hold(hook: Hook, tmp_path: Path) -> tuple[Notifier, Alert]:
    """a1..a3 down under their rack; the rack and a1, a2 back at T+60; the processor
    restarted at T+70, taking over a3 (firing, un-muted, held)."""
    store = tmp_store(tmp_path)
    a1, a2, a3 = (_node(n) for n in ("a1", "a2", "a3"))
    before = _notifier(hook, store)
    before.send([RACK, a1, a2, a3], now=T)
    before.send([_end(RACK, T + 60), _end(a1, T + 60), _end(a2, T + 60)], now=T + 60)
    before.send([], now=T + 65)
    before.close()
    assert _posted(hook) == [("rack:r1", "firing"), ("rack:r1", "resolved")]
    after = _notifier(hook, store)
    after.adopt([a3])
    after.send([], now=T + 70)
    return after, a3


def test_a_node_back_within_the_hold_across_a_restart_is_never_posted(
        hook: Hook, tmp_path: Path) -> None:
    after, a3 = _restarted_within_the_hold(hook, tmp_path)
    try:
        after.send([_end(a3, T + 80)], now=T + 80)
        after.send([], now=T + 60 + RECOVERY_HOLD_S + 5)
    finally:
        after.close()
    assert _posted(hook) == [("rack:r1", "firing"), ("rack:r1", "resolved")]


def test_a_node_still_down_is_paged_once_the_hold_from_before_the_restart_passed(
        hook: Hook, tmp_path: Path) -> None:
    after, a3 = _restarted_within_the_hold(hook, tmp_path)
    try:
        after.send([], now=T + 60 + RECOVERY_HOLD_S / 2)
        assert _posted(hook)[2:] == []
        after.send([], now=T + 61 + RECOVERY_HOLD_S)
        assert _posted(hook)[2:] == [("a3", "firing")]
        after.send([_end(a3, T + 200)], now=T + 200)
    finally:
        after.close()
    assert _posted(hook)[2:] == [("a3", "firing"), ("a3", "resolved")]
