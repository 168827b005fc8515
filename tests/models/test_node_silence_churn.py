"""An autoscaled pool: nodes come and go by the hundred while a few stay. "Now" is the
consensus of the nodes heard from lately; nodes gone for good, already judged silent,
must not count among them: with every name held (up to ``FORGET_S``), the window of
"lately" grew to hours of frames, most of its senders dead, and their old last frames
held the clock back (a node that died was paged hours late). (r24 churn run.)"""

from __future__ import annotations

from fleetwatch.models.node_silence import NodeSilence
from tests.models.helpers import busy, node

STEP = 5.0
LIVE = 20


def test_the_clock_keeps_up_with_the_live_nodes_under_heavy_churn() -> None:
    d = NodeSilence()
    t, serial, ephemeral = 1000.0, 0, []
    # Two hours of churn: 20 nodes stay; an ephemeral node lives 60 s, a new one starts
    # every 5 s (720 names an hour, as the churn run had).
    while t < 1000.0 + 2 * 3600:
        if int(t) % 5 == 0:
            ephemeral.append((f"e{serial:05d}", t))
            serial += 1
        alive = [name for name, born in ephemeral if t - born < 60.0]
        frames = [node(t, [busy(60)], name=f"s{i:02d}") for i in range(LIVE)]
        frames += [node(t, [busy(60)], name=name) for name in alive]
        d.update(frames)
        t += STEP
    last = t - STEP
    assert last - d.now < 3 * STEP, (last, d.now)
    # A live node that dies now is paged within its limit, not hours later.
    stop_at = t
    findings = []
    while t < stop_at + 300.0:
        frames = [node(t, [busy(60)], name=f"s{i:02d}") for i in range(1, LIVE)]
        findings += [f for f in d.update(frames) if f.node == "s00" and f.rule == "node_silent"]
        t += STEP
    assert findings, "s00 was never paged"
    assert findings[0].ts - stop_at < 120.0, findings[0].ts - stop_at
