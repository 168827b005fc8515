"""A node whose agent stopped cleanly (its last frame says ``host_agent_stopped``: a drain,
a scale-down) stays stopped for the processor that takes its partition over (a restart, a
rolling update of the processors, a rebalance): it is not paged silent then. The k8s run of
round 25: every processor rollout paged every node drained in the last 7 days. Over the
in-process bus and a real SQLite store; ``tests/store/test_contract_samples.py`` checks that every
backend tells the stop back (``stopped_at``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import AGENT_STOPPED, Frame, HostReading
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_silent_takeover import run_until_stored, silent_alerts, ticks
from tests.models.helpers import busy, node


def last(f: Frame) -> Frame:
    """The frame an agent sends as it stops cleanly."""
    return dataclasses.replace(f, host=HostReading({**f.host.metrics, AGENT_STOPPED: 1.0}))


def test_an_expected_node_whose_agent_stopped_is_not_judged_silent() -> None:
    d = NodeSilence()
    for k in range(4):
        d.update([node(1000 + 30.0 * k, [busy(60)], name=n) for n in ("a", "c")])
    # b and c: the store's last frames; b's said its agent stopped.
    d.expect([("c", "r1", "b", 1090.0, True), ("c", "r1", "c", 1090.0, False)])
    found = set()
    for k in range(4, 30):
        found |= {(f.rule, f.node) for f in d.update([node(1000 + 30.0 * k, [busy(60)],
                                                            name="a")])}
    assert ("node_silent", "c") in found
    assert ("node_silent", "b") not in found


def test_a_node_stopped_cleanly_is_not_paged_after_a_processor_restart(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    before = ticks(("a", "b"), 0, 6)
    before[-1] = last(before[-1])                       # b's agent stops: SIGTERM
    assert before[-1].node == "b"
    run_until_stored(db, before, 13)       # 12 temperatures, 1 stop
    # The processor is replaced (a rolling update); only "a" sends, for 3 minutes.
    after = run_until_stored(db, ticks(("a",), 6, 24), 13 + 18)
    assert silent_alerts(db) == []
    assert after.alerts.open == []
    # Restarted again: still not paged.
    run_until_stored(db, ticks(("a",), 24, 40), 13 + 18 + 16)
    assert silent_alerts(db) == []


def test_a_node_back_after_a_clean_stop_that_then_dies_is_paged_after_a_restart(
        tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    early = ticks(("a", "b"), 0, 3)
    early[-1] = last(early[-1])                          # stopped at 20 s, back at 30 s
    run_until_stored(db, early + ticks(("a", "b"), 3, 6), 13)
    run_until_stored(db, ticks(("a",), 6, 24), 13 + 18)
    assert [(a.node, a.state) for a in silent_alerts(db)] == [("b", "firing")]


def test_a_stopped_agent_not_back_warns_in_the_store_and_ends_at_its_next_frame(
        tmp_path: Path) -> None:
    """``agent_stopped`` through a processor into a real store: a warning naming the node,
    its stop and what to do, resolved once a frame of it comes (a DaemonSet pod fixed)."""
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, [NodeSilence(DetectorsConfig(agent_stopped_grace_s=120.0))])
    before = ticks(("a", "b"), 0, 6)
    before[-1] = last(before[-1])                       # b stops cleanly at 50 s
    processor.process(before + ticks(("a",), 6, 30))    # and is not back for 4 minutes
    (warned,) = [a for a in store.alerts() if a.node == "b"]
    assert (warned.rule, warned.severity, warned.state) == ("agent_stopped", "warning",
                                                           "firing")
    assert "agent stopped cleanly at" in warned.message
    assert "DaemonSet" in warned.action
    processor.process(ticks(("a", "b"), 30, 32))
    assert [a for a in store.alerts() if a.node == "b"] == []
    (ended,) = [a for a in store.alerts(states=("resolved",)) if a.node == "b"]
    assert ended.id == warned.id
    store.close()
