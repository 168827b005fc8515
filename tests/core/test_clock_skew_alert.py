"""A node whose clock is far off is a fleetwatch alert, not only a log line: one 10 min
ahead (every frame refused, so no detector ever sees it) and one 10 min behind (stored
at its wrong time) each raise one ``node_clock_skew`` alert naming the node and its
offset, judged in steady state (a live processor polls one node's frame at a time), and
resolved once the clock is right. A node behind is not judged silent for it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_clock_intake import FAR, NOW, frame, messages


def skew_alerts(p: Processor) -> list:
    return [a for a in p.store.alerts(states=("firing", "resolved"))
            if a.rule == "node_clock_skew"]


def test_a_node_ten_minutes_ahead_raises_one_critical_alert_then_resolves(
        tmp_path: Path) -> None:
    clock = [NOW]
    p = Processor(SqliteStore(tmp_path / "s.db"), [NodeSilence()], clock=lambda: clock[0])
    offset = 0
    for k in range(60):
        clock[0] = NOW + 5.0 * k
        fast = 600.0 if k < 40 else 0.0  # NTP fixed at k == 40
        # Each poll brings one node's frame, as a live processor's usually do.
        for f in (frame("a", clock[0] - 0.5), frame("c", clock[0] + fast)):
            p.handle(messages([f], offset))
            offset += 1
        if k == 39:
            (alert,) = skew_alerts(p)
            assert alert.state == "firing" and alert.severity == "critical"
            assert alert.node == "c" and alert.value == pytest.approx(600.0, abs=1)
            assert "600 s ahead" in alert.message and "refused" in alert.message
    p.store.close()
    assert p.stats.by_reason == {"clock": 40}
    (alert,) = skew_alerts(p)  # one alert, not one a frame
    assert alert.state == "resolved" and alert.resolved_ts == pytest.approx(NOW + 200.0)
    assert [a for a in p.alerts.open if a.rule == "node_silent"] == []


def test_a_node_ten_minutes_behind_is_said_once_alerted_and_not_silent(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = [NOW]
    p = Processor(SqliteStore(tmp_path / "s.db"), [NodeSilence()], clock=lambda: clock[0])
    offset = 0
    with caplog.at_level(logging.INFO, logger="fleetwatch.pipeline.processor"):
        for k in range(120):
            clock[0] = NOW + 5.0 * k
            for f in (frame("a", clock[0] - 0.5), frame("b", clock[0] - 0.3),
                      frame("d", clock[0] - 600.0)):
                p.handle(messages([f], offset))
                offset += 1
                p.tick()
    p.store.close()
    lines = [r.getMessage() for r in caplog.records if "c1/r1/d" in r.getMessage()]
    assert len(lines) == 1 and "its clock is 600 s behind" in lines[0]  # no flip back
    assert p.clocks.offsets == {("c1", "d"): pytest.approx(-600.0, abs=1)}
    (alert,) = skew_alerts(p)
    assert alert.state == "firing" and alert.severity == "warning" and alert.node == "d"
    assert "600 s behind" in alert.message
    assert [a for a in p.store.alerts(states=("firing", "resolved"))
            if a.rule == "node_silent"] == []


def test_one_stray_frame_far_ahead_pages_nobody(tmp_path: Path) -> None:
    # A backlog 10 min old, one frame of it stamped 2099: dead-lettered, and its alert
    # (pending) ends with the node's next frame, older than the processor's clock.
    p = Processor(SqliteStore(tmp_path / "s.db"), [], clock=lambda: NOW)
    sent = [frame("n1", NOW - 600 + 5.0 * k) for k in range(60)]
    sent.insert(30, frame("n1", FAR))
    for i in range(0, 61, 10):
        p.handle(messages(sent[i:i + 10], i))
    p.store.close()
    assert p.stats.by_reason == {"clock": 1}
    assert [a.state for a in skew_alerts(p)] in ([], ["resolved"])
    assert not any(a.fired_ts for a in skew_alerts(p)) and p.alerts.open == []


def test_a_node_behind_is_alerted_on_the_fleets_clock_and_resolves_when_fixed(
        tmp_path: Path) -> None:
    """Its alert starts and fires at the fleet's time (the processor's), not at its own
    wrong clock, 330 s before it was even seen (round 25, k8s run: "firing since" a time
    before the agent existed); it resolves once its clock is right."""
    clock = [NOW]
    p = Processor(SqliteStore(tmp_path / "s.db"), [NodeSilence()], clock=lambda: clock[0])
    offset = 0
    for k in range(80):
        clock[0] = NOW + 5.0 * k
        slow = 330.0 if k < 50 else 0.0   # NTP fixed at k == 50
        for f in (frame("a", clock[0] - 0.5), frame("b", clock[0] - 0.3),
                  frame("d", clock[0] - slow)):
            p.handle(messages([f], offset))
            offset += 1
            p.tick()
        if k == 49:
            (alert,) = skew_alerts(p)
            assert alert.state == "firing" and alert.node == "d"
            # Seen behind from NOW, steadily for 60 s: started then on the fleet's clock.
            assert NOW + 55.0 <= alert.started_ts <= NOW + 70.0, alert.started_ts - NOW
            assert alert.fired_ts is not None and alert.fired_ts >= alert.started_ts
    p.store.close()
    (alert,) = skew_alerts(p)
    assert alert.state == "resolved"
    assert alert.resolved_ts == pytest.approx(NOW + 250.0, abs=6.0)


def test_a_refused_node_that_dies_ends_its_skew_alert_and_is_paged_silent(
        tmp_path: Path) -> None:
    """Every frame of it refused (600 s ahead), then it stops sending (round 25, k8s run: a
    pending node_clock_skew for ever, and the node never paged): its skew alert ends once
    no frame of it has come for ``REFUSED_GONE_S``, and it is paged ``node_silent`` a limit
    after its last frame arrived, as a node known to this processor would be."""
    clock = [NOW]
    p = Processor(SqliteStore(tmp_path / "s.db"), [NodeSilence()], clock=lambda: clock[0])
    offset = 0
    for k in range(150):
        clock[0] = NOW + 5.0 * k
        batch = [frame("a", clock[0] - 0.5), frame("b", clock[0] - 0.3)]
        if k < 6:                                   # 30 s of frames, every one refused
            batch.append(frame("c", clock[0] + 600.0))
        for f in batch:
            p.handle(messages([f], offset))
            offset += 1
    p.store.close()
    assert [a for a in p.alerts.open if a.rule == "node_clock_skew"] == []
    silent = [a for a in p.alerts.open if a.rule == "node_silent"]
    assert [(a.node, a.state) for a in silent] == [("c", "firing")]
    assert silent[0].started_ts <= NOW + 25.0 + 60.0 + 5.0
