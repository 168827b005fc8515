"""A clean-stop frame stamped ahead of the stream is not the node's last word for ever.

A client sent one frame of live node b saying its agent stopped (``host_agent_stopped``),
stamped 250 s ahead (inside ``processor.max_clock_ahead_s``); b's real frames went on, then
b died: no ``node_silent`` page, only ``agent_stopped`` (a warning) saying b "stopped cleanly
at" a time still to come. The same happens honestly to a node whose clock stepped back
(NTP) after its agent stopped with it ahead. A node's later frame ends its stop whatever
its stamp, and a stop is said at the time it was heard, never later.
"""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.codec import encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node
from tests.models.test_node_silence_stopped import last

RULES = {"node_silent": (), "agent_stopped": (), "rack_silent": ()}
AHEAD = 250.0


def run(d: NodeSilence, b_frames: dict[float, list], until: float
        ) -> list[tuple[str, str, str, float, str]]:
    """Nodes a and c every second (wall = their time); b's frames as ``b_frames`` has them at
    each second. The alerts' first change to each state: (rule, node, state, when,
    message)."""
    book = AlertBook(requirements=RULES)
    out = []
    t = 1000.0
    while t < until:
        frames = [node(t, [busy(60)], name="a"), *b_frames.get(t, []),
                  node(t, [busy(60)], name="c")]
        got = book.observe(frames, d.update(frames, wall=t))
        book.apply(got)
        out += [(a.rule, a.node, a.state, a.started_ts, a.message) for a in got
                if not [o for o in out if o[:3] == (a.rule, a.node, a.state)]]
        t += 1.0
    return out


def test_a_forged_stop_ahead_then_frames_then_death_pages_the_node() -> None:
    b = {t: [node(t, [busy(60)], name="b")] for t in (1000.0 + k for k in range(16))}
    b[1005.0].append(last(node(1005.0 + AHEAD, [busy(60)], name="b")))  # forged
    seen = run(NodeSilence(DetectorsConfig(silent_min_s=20.0, agent_stopped_grace_s=30.0)),
               b, 1100.0)
    firing = [(r, n) for r, n, s, _, _ in seen if s == "firing"]
    assert firing == [("node_silent", "b")]
    [(_, _, _, started, message)] = [s for s in seen if s[0] == "node_silent"]
    assert 1015.0 + 20.0 <= started <= 1015.0 + 25.0


def test_a_node_whose_clock_stepped_back_after_its_stop_is_paged_when_it_dies() -> None:
    """Its agent stopped with the clock 250 s ahead; started again once NTP set it right,
    it sent 20 s of frames, then crashed."""
    b = {t: [node(t + AHEAD, [busy(60)], name="b")] for t in (1000.0 + k for k in range(5))}
    b[1005.0] = [last(node(1005.0 + AHEAD, [busy(60)], name="b"))]
    b.update({t: [node(t, [busy(60)], name="b")] for t in (1010.0 + k for k in range(20))})
    seen = run(NodeSilence(DetectorsConfig(silent_min_s=20.0, agent_stopped_grace_s=30.0)),
               b, 1100.0)
    assert [(r, n, s) for r, n, s, _, _ in seen if s == "firing"] == [
        ("node_silent", "b", "firing")]


def test_a_stop_stamped_ahead_is_said_at_the_time_it_was_heard() -> None:
    """An agent whose clock is 250 s ahead stops and stays stopped: not paged (a clean
    stop), and its warning says when it was heard stopping, not a time still to come."""
    b = {t: [node(t + AHEAD, [busy(60)], name="b")] for t in (1000.0 + k for k in range(5))}
    b[1005.0] = [last(node(1005.0 + AHEAD, [busy(60)], name="b"))]
    d = NodeSilence(DetectorsConfig(silent_min_s=20.0, agent_stopped_grace_s=30.0))
    seen = run(d, b, 1100.0)
    assert [(r, n, s) for r, n, s, _, _ in seen] == [("agent_stopped", "b", "firing")]
    [(_, _, _, started, message)] = seen
    assert started <= 1005.0 + 30.0
    assert "stopped cleanly at 1970-01-01 00:16:45 UTC" in message  # 1005: heard then
    found = d.update([node(1100.0, [busy(60)], name="a")], wall=1100.0)
    [warning] = [f for f in found if f.rule == "agent_stopped"]
    assert warning.evidence["stopped_ts"] <= warning.ts
    assert warning.evidence["stopped_s"] == warning.ts - warning.evidence["stopped_ts"]


def test_the_processor_records_the_stop_at_its_own_time_not_the_frames(tmp_path: Path
                                                                       ) -> None:
    """Through the intake (a processor with a clock, frames on a bus): the 'stopped' event
    and the warning's text say when the stop was heard, never a time ahead of the clock."""
    now = [1_795_757_000.0]
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, [NodeSilence(DetectorsConfig(
        silent_min_s=20.0, agent_stopped_grace_s=30.0))], clock=lambda: now[0])
    offset = 0
    for k in range(80):
        frames = [node(now[0], [busy(60)], name="a")]
        if k < 5:
            frames.append(node(now[0] + AHEAD, [busy(60)], name="b"))
        elif k == 5:
            frames.append(last(node(now[0] + AHEAD, [busy(60)], name="b")))
        processor.handle([Message(encode(f), f.node.encode(), "frames", 0, offset + i)
                          for i, f in enumerate(frames)])
        offset += len(frames)
        now[0] += 1.0
    processor.flush()
    stop = 1_795_757_005.0
    [event] = [e for e in store.events(0, 10 ** 13) if e.kind == "node_state"]
    assert (event.node, event.value) == ("b", "stopped")
    assert event.ts == stop and _utc(stop) in event.text
    [alert] = store.alerts()
    assert (alert.rule, alert.node) == ("agent_stopped", "b")
    assert f"stopped cleanly at {_utc(stop)}" in alert.message and alert.started_ts <= now[0]
    store.close()


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
