"""A node silent and back is in the events (``node_state``), so the timeline of a reboot
says when the node went away and came back: README and `timeline --help` promised "a node
silent or back", and no part of fleetwatch wrote one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetwatch.frame import AGENT_STOPPED, Frame, HostReading
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.node_states import NodeStates
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node


def silent(at: float, state: str = "firing", updated: float | None = None) -> Alert:
    return Alert("node_silent/c/n9/host/1", "node_silent", "critical", "c", "r1", "n9", "host",
                 state, at, at if updated is None else updated, 60.0,
                 "n9 has sent nothing for 60 s", fired_ts=at,
                 resolved_ts=updated if state == "resolved" else None)


def frame(ts: float, node: str = "n9") -> Frame:
    return Frame("c", "r1", node, ts, ())


def stopping() -> HostReading:
    return HostReading(metrics={AGENT_STOPPED: 1.0})


def seen(events: list) -> list[tuple[float, str, str, str]]:
    return [(e.ts, e.kind, e.node, e.value) for e in events]


def test_a_node_silent_then_back_is_two_events() -> None:
    s = NodeStates()
    assert seen(s.update([frame(100, "n1")], [silent(160)])) == [
        (160, "node_state", "n9", "silent")]
    assert s.update([frame(170, "n1")], [silent(160, updated=220)]) == []  # still silent
    assert seen(s.update([frame(230), frame(230, "n1")], [])) == [
        (230, "node_state", "n9", "back")]
    assert s.update([frame(235)], []) == []                           # once
    # silent again while its alert is still kept firing: silent again, back again
    assert seen(s.update([], [silent(160, updated=300)])) == [(300, "node_state", "n9", "silent")]
    assert seen(s.update([frame(310)], [])) == [(310, "node_state", "n9", "back")]
    assert s.update([], [silent(160, "resolved", 610)]) == []


def test_an_alert_taken_over_writes_no_silent_again_nor_a_guessed_back() -> None:
    s = NodeStates()
    refreshed = dataclasses.replace(silent(160), updated_ts=400.0)  # a write after the takeover
    assert s.update([], [refreshed]) == []    # its "silent" is the processor before's
    assert s.update([frame(500)], []) == []   # back now, or long before: not guessed


def test_a_node_back_after_a_stop_stamped_ahead_is_back_after_it() -> None:
    """A stop stamped ahead of the frames after it (its clock stepped back; a replay,
    where no clock caps it) must not read "back" before "stopped" on the timeline."""
    s = NodeStates()
    stop = dataclasses.replace(frame(500), host=stopping())
    assert seen(s.update([stop], [])) == [(500, "node_state", "n9", "stopped")]
    assert seen(s.update([frame(300)], [])) == [(500, "node_state", "n9", "back")]
    live = NodeStates()
    assert seen(live.update([stop], [], now=420)) == [(420, "node_state", "n9", "stopped")]
    assert seen(live.update([frame(300)], [], now=425)) == [(420, "node_state", "n9", "back")]
    assert seen(live.update([stop], [], now=430)) == [(430, "node_state", "n9", "stopped")]
    assert seen(live.update([frame(431)], [], now=431)) == [(431, "node_state", "n9", "back")]


def test_a_processor_stores_a_node_silent_and_back(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fw.db")
    processor = Processor(store, detectors=[NodeSilence()], keep_firing_s=300.0)
    for k in range(121):                       # n1 every 5 s; n9 away from 100 s to 300 s
        t = 1_000.0 + 5 * k
        nodes = ["n1"] + (["n9"] if not 1_100 < t < 1_300 else [])
        processor.process([node(t, [busy(60)], name=n) for n in nodes])
    events = [(e.node, e.value) for e in store.events(0, 1e12, kinds=["node_state"])]
    times = [e.ts for e in store.events(0, 1e12, kinds=["node_state"])]
    store.close()
    assert events == [("n9", "silent"), ("n9", "back")], events
    assert 1_155 <= times[0] <= 1_170 and times[1] == 1_300.0, times
