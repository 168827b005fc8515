"""A node whose agent now reports more slowly (its ``agent.interval_s`` raised in a rolling
config change: 5 s to 65 s) is not a silent node: its frames say their agent's interval
(``host_agent_interval_s``), and it is judged on that from its first such frame, also by
a processor that has just started and has learned nothing of it. Before, it was paged
critical for minutes, and again after every processor restart. A node that really falls
silent is paged as before, on the interval its frames said."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetwatch.frame import Frame, HostReading
from fleetwatch.models import Finding
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node


def frame(t: float, name: str, interval: float | None) -> Frame:
    f = node(t, [busy(60)], name=name)
    said = {} if interval is None else {"host_agent_interval_s": interval}
    return dataclasses.replace(f, host=HostReading(said))


def run(d: NodeSilence, start: float, end: float, slow: dict[str, float],
        said: bool = True) -> list[Finding]:
    """Every 5 s from ``start``: a frame of "a" (every 5 s) and of each node of ``slow`` at
    its interval; the silent-node findings of the nodes other than "a"."""
    pages, t = [], start
    while t < end:
        frames = [frame(t, "a", 5.0 if said else None)]
        frames += [frame(t, n, iv if said else None) for n, iv in slow.items()
                   if (t - start) % iv == 0]
        pages += [f for f in d.update(frames, wall=t + 0.1)
                  if f.node != "a" and f.rule == "node_silent"]
        t += 5.0
    return pages


def test_an_agent_that_now_reports_every_65_s_is_not_silent() -> None:
    d = NodeSilence()
    run(d, 1000, 1300, {"b": 5.0})                 # every 5 s
    assert run(d, 1300, 2300, {"b": 70.0}) == []   # then every 70 s, saying so


def test_a_restarted_processor_judges_a_slow_agent_on_its_interval_at_once() -> None:
    d = NodeSilence()
    d.expect([("c", "r1", "b", 1290.0)])           # the store's last frame of it
    assert run(d, 1300, 1300 + 70.0 * 10, {"b": 70.0}) == []


def test_an_agent_slow_and_silent_is_paged_after_its_limit() -> None:
    d = NodeSilence()
    run(d, 1000, 1390, {"b": 70.0})
    died = 1000 + 70.0 * 5                          # its last frame: 1390
    pages = run(d, 1395, 1395 + 900, {})
    assert pages, "a slow node that died is paged"
    first = pages[0]
    assert first.ts - died <= 6 * 70 + 5, first
    assert "it reports every 70 s" in first.message


def test_a_fast_agent_that_dies_is_still_paged_within_a_minute() -> None:
    d = NodeSilence()
    run(d, 1000, 1300, {"b": 5.0})
    pages = run(d, 1300, 1600, {})
    assert pages and pages[0].ts - 1295 <= 65


def test_an_older_agent_that_says_nothing_is_learned_from_its_gaps_as_before() -> None:
    d = NodeSilence()
    run(d, 1000, 1300, {"b": 5.0}, said=False)
    pages = run(d, 1300, 2300, {"b": 70.0}, said=False)
    # the first slow gap is an outage (paged), the second teaches it; none after
    assert pages and max(p.ts for p in pages) < 1300 + 3 * 70


def test_a_processor_stores_no_node_silent_alert_for_a_slower_agent(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fw.db")
    processor = Processor(store, detectors=[NodeSilence()], keep_firing_s=300.0)
    for k in range(400):                 # "b" every 5 s, then every 70 s from 1300 s
        t = 1000.0 + 5 * k
        frames = [frame(t, "a", 5.0)]
        if t < 1300 or (t - 1300) % 70 == 0:
            frames.append(frame(t, "b", 5.0 if t < 1300 else 70.0))
        processor.process(frames)
    alerts = store.alerts(("pending", "firing", "resolved"))
    store.close()
    assert [a for a in alerts if a.rule == "node_silent"] == []
