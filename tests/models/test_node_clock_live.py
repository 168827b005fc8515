"""The stream's clock when frames come live from a bus (``wall``: the processor's clock).
The nodes heard from lately are those whose frames arrived within a step of the time the
processor has spent listening, not those among the last ``2 x nodes`` frames: nodes that
stop, however many, leave the consensus within a step, and so do the one-frame nodes of a
flood. (r26: a hall losing power, 98 of 100 nodes at 1 s, was paged at ~105 s instead of
~20 s; 3,000 made-up nodes sent in a second blinded the rule for 95+ s.) A pause of the
whole stream that this processor did not hear (its brokers away, itself stopped) still
counts against no node; one it listened to still counts."""

from __future__ import annotations

import pytest

from fleetwatch.config import DetectorsConfig
from fleetwatch.models import Finding
from fleetwatch.models.node_silence import NodeSilence
from tests.models.helpers import busy, node

LIMIT = 20.0  # silent_min_s: each node reports every second


def firsts(found: list[Finding]) -> dict[tuple[str, str], float]:
    """When each (rule, node or rack) was first found."""
    out: dict[tuple[str, str], float] = {}
    for f in found:
        out.setdefault((f.rule, f.node or f.rack), f.ts)
    return out


def hall(wall: bool, nodes: int = 100, live: int = 2) -> tuple[dict, float]:
    """``nodes`` in 10 racks report every second; at 1011 all but ``live`` stop."""
    names = [f"n{i:03d}" for i in range(nodes)]
    d = NodeSilence(DetectorsConfig(silent_min_s=LIMIT))
    found: list[Finding] = []
    for k in range(12 + 50):
        t = 1000.0 + k
        frames = [node(t, [busy(60)], name=n, rack=f"r{i % 10}")
                  for i, n in enumerate(names if k < 12 else names[:live])]
        found += d.update(frames, wall=t + 0.2 if wall else None)
    return firsts(found), 1011.0


def test_most_of_a_hall_losing_power_is_paged_within_its_limit() -> None:
    first, died = hall(wall=True)
    silent = {n: ts for (rule, n), ts in first.items() if rule == "node_silent"}
    assert set(silent) == {f"n{i:03d}" for i in range(2, 100)}
    assert died + LIMIT < min(silent.values()) and max(silent.values()) <= died + LIMIT + 2
    racks = {r: ts for (rule, r), ts in first.items() if rule == "rack_silent"}
    assert set(racks) == {f"r{i}" for i in range(10)}
    assert max(racks.values()) <= died + LIMIT + 2


def test_a_hall_of_a_thousand_nodes_with_ten_left_is_paged_within_its_limit() -> None:
    first, died = hall(wall=True, nodes=1000, live=10)
    silent = [ts for (rule, _), ts in first.items() if rule == "node_silent"]
    assert len(silent) == 990 and max(silent) <= died + LIMIT + 2


def test_a_flood_of_made_up_nodes_does_not_blind_the_rule() -> None:
    d = NodeSilence(DetectorsConfig(silent_min_s=LIMIT))
    found: list[Finding] = []
    for k in range(10):
        t = 1000.0 + k
        found += d.update([node(t, [busy(60)], name=n) for n in ("g1", "g2", "g3")],
                          wall=t + 0.2)
    for j in range(6):  # 3,000 one-frame nodes, in under a second; then g1 dies
        t = 1009.5 + 0.1 * j
        found += d.update([node(t, [busy(60)], name=f"forged-{i}", rack="rx")
                           for i in range(500 * j, 500 * (j + 1))], wall=t + 0.05)
    for k in range(10, 100):  # (until g1 is paged: the made-up nodes are, each batch)
        t = 1000.0 + k
        found += d.update([node(t, [busy(60)], name=n) for n in ("g2", "g3")], wall=t + 0.2)
        if any(f.node == "g1" for f in found):
            break
    first = firsts(found)
    assert 1009.0 + LIMIT < first[("node_silent", "g1")] <= 1009.0 + LIMIT + 2
    assert ("node_silent", "g2") not in first and ("node_silent", "g3") not in first


def test_a_replay_keeps_the_frame_count_window() -> None:
    # No wall clock (a replay, a simulation): the nodes among the last 2 x (nodes not
    # silent) frames, as before; the hall is paged once that many frames have come.
    first, died = hall(wall=False, nodes=20, live=2)
    silent = [ts for (rule, _), ts in first.items() if rule == "node_silent"]
    assert len(silent) == 18 and max(silent) <= died + 2 * 20 / 2 + LIMIT + 2


@pytest.mark.parametrize("order", ["one node a batch", "all at once"])
def test_a_broker_outage_then_frames_coming_back_pages_nobody(order: str) -> None:
    """The brokers are away 5 min (the processor is deaf: none of it was listened to);
    then the fleet's frames come back, one node a batch as the polls bring them."""
    names = [f"n{i}" for i in range(10)]
    d = NodeSilence()
    found: list[Finding] = []
    for k in range(60):
        t = 1000.0 + 5.0 * k
        found += d.update([node(t, [busy(60)], name=n) for n in names], wall=t + 0.1)
    d.tick(1295.0 + 1.1)  # a poll as of the brokers' last answer; then none answers
    for _ in range(300):
        d.deaf()
    for k in range(60, 90):
        t = 1000.0 + 300 + 5.0 * k
        if order == "all at once":
            found += d.update([node(t, [busy(60)], name=n) for n in names], wall=t + 0.1)
            continue
        for j, n in enumerate(names):
            found += d.update([node(t + 0.4 * j, [busy(60)], name=n)], wall=t + 0.4 * j + 0.1)
            found += d.tick(t + 0.4 * j + 0.3)
    assert found == []


def test_after_a_quiet_listened_to_a_node_still_dead_stays_paged_as_the_rest_trickle_back(
        ) -> None:
    """Every agent stopped (a site's power) while the processor listened: each node was
    paged on its clock. They come back one a batch; one does not: it is still found
    silent, "now" not gone back to the last frames before the quiet (as it was, until
    most of the fleet was back)."""
    names = [f"n{i}" for i in range(10)]
    d = NodeSilence()
    for k in range(60):
        t = 1000.0 + 5.0 * k
        d.update([node(t, [busy(60)], name=n) for n in names], wall=t + 0.1)
    last = 1295.0
    paged = set()
    for s in range(1, 121):
        paged |= {f.node for f in d.tick(last + 0.1 + s)}
    assert set(names) <= paged
    for j, n in enumerate(names[1:]):
        t = last + 125 + 0.5 * j
        found = d.update([node(t, [busy(60)], name=n)], wall=t + 0.1)
        assert d.now >= last + 120
        silent = {f.node for f in found if f.rule == "node_silent"}
        assert "n0" in silent and n not in silent
