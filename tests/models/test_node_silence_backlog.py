"""The silent-node rule while a processor catches up a backlog: its partitions are read
unevenly (one minutes ahead of another), and the processor says which nodes' partitions
still hold frames not read yet (``behind``). No node that kept sending is paged; a node
that died in the backlog is, once its own partition has reached its limit."""

from __future__ import annotations

from fleetwatch.models import Finding
from fleetwatch.models.node_silence import NodeSilence
from tests.models.helpers import busy, node

LANES = {"p0": [f"a{k}" for k in range(10)], "p1": [f"b{k}" for k in range(10)],
         "p2": [f"c{k}" for k in range(10)]}
START, END = 1000.0, 1240.0  # four minutes of frames every 5 s, in the brokers
WALL = END + 5.0             # the processor starts just after


def catch_up(dead: str | None = None, died: float = 1030.0) -> list[Finding]:
    """Read the backlog: partition p0 three frames of its nodes a batch, p1 two, p2 one
    (the read interleaved, at different progress); then polls that bring nothing. A node
    that died before the backlog is one the store names (``expect``)."""
    d = NodeSilence()
    if dead is not None and died < START:
        d.expect([("c", "r1", dead, died)])
    reached = dict.fromkeys(LANES, START)
    pace = {"p0": 3, "p1": 2, "p2": 1}
    found: list[Finding] = []
    while any(t < END for t in reached.values()):
        batch = []
        for lane, names in LANES.items():
            for _ in range(pace[lane]):
                t = reached[lane]
                if t < END:
                    batch += [node(t, [busy(60)], name=n) for n in names
                              if not (n == dead and t > died)]
                    reached[lane] = t + 5.0
        d.behind({("c", n): lane for lane, names in LANES.items() if reached[lane] < END
                  for n in names})
        found += d.update(batch, wall=WALL)
    d.behind({})
    for k in range(1, 30):  # caught up; the fleet has gone quiet for less than a limit
        found += d.tick(WALL + k)
    return found


def test_a_backlog_read_unevenly_pages_no_node_that_kept_sending() -> None:
    assert catch_up() == []


def test_a_node_dead_in_the_backlog_is_paged_on_its_own_partitions_time() -> None:
    for dead in ("a3", "b3", "c3"):
        found = catch_up(dead=dead)
        assert {f.node for f in found} == {dead}
        first = min(f.ts for f in found)
        # Its partition's time passed its limit (60 s): not earlier, not at the end only.
        assert 1030.0 + 60.0 < first <= 1030.0 + 75.0, (dead, first)
        assert "it reports every 5 s" in found[0].message


def test_a_node_dead_before_the_backlog_is_paged_once_caught_up() -> None:
    found = catch_up(dead="c5", died=START - 20.0)
    assert {f.node for f in found} == {"c5"}
    # Given a limit from the takeover to report, then judged on its partition's time.
    assert min(f.ts for f in found) <= END


def test_a_whole_partition_gone_quiet_is_paged_once_read_to_its_end() -> None:
    d = NodeSilence()
    names = LANES["p0"] + LANES["p1"]
    for k in range(20):
        t = START + 5.0 * k
        d.update([node(t, [busy(60)], name=n) for n in names], wall=t + 0.1)
    last = START + 95.0
    pages: list[Finding] = []
    for k in range(1, 30):  # p1's nodes all died; p1 is read to its end: behind() empty
        t = last + 5.0 * k
        d.behind({})
        pages += d.update([node(t, [busy(60)], name=n) for n in LANES["p0"]], wall=t + 0.1)
    assert {f.node for f in pages if f.rule == "node_silent"} == set(LANES["p1"])
    # They stopped together, in one rack: that rack is down too (models/rack_silence.py).
    assert {f.rack for f in pages if f.rule == "rack_silent"} == {"r1"}


def test_a_partition_read_to_its_end_in_one_batch_sets_now_for_the_rest() -> None:
    # p0's whole backlog, then more frames of p1 than the fleet has nodes twice over:
    # p0's nodes are no longer among the last heard, yet their time is the stream's.
    d = NodeSilence()
    a, b = LANES["p0"], LANES["p1"]
    t, found, theirs = START, [], 0
    batch = [node(s, [busy(60)], name=n) for s in range(int(START), int(END) + 1, 5)
             for n in a]
    while t <= END:
        batch += [node(t, [busy(60)], name=n) for n in b]
        t, theirs = t + 5.0, theirs + len(b)
        if theirs >= 60 or t > END:
            theirs = 0
            d.behind({("c", n): "p1" for n in b} if t <= END else {})
            found += d.update(batch, wall=WALL)
            batch = []
    assert found == []


def test_a_node_whose_clock_is_behind_does_not_hold_its_partition_back() -> None:
    """After a store outage the processor catches up, its partitions read unevenly. nodeB
    shares its partition with nodeD, whose clock is 10 min behind: nodeD must not set the
    partition's time, or nodeB's frames read meanwhile count as "ahead" of it and are not
    heard, and both are paged once the partition has caught up (seen live: a false
    critical node_silent on a node that never stopped, for 5 min)."""
    d = NodeSilence()
    lanes = {("c", "nodeA"): "p0", ("c", "nodeB"): "p1", ("c", "nodeD"): "p1"}

    def update(frames: list, wall: float, behind: set[str]) -> list[Finding]:
        d.behind({n: lane for n, lane in lanes.items() if lane in behind})
        return [f for f in d.update(frames, wall=wall) if f.rule == "node_silent"]

    found: list[Finding] = []
    for k in range(30):  # live, in step
        t = START + 5.0 * k
        found += update([node(t, [busy(60)], name="nodeA"), node(t + 1, [busy(60)], name="nodeB"),
                         node(t + 2 - 600, [busy(60)], name="nodeD")], t + 3, set())
    out = START + 150.0
    wall = out + 130.0  # the store was away 130 s; then the backlog is read
    found += update([node(out + 5.0 * j, [busy(60)], name="nodeA") for j in range(27)], wall,
                    {"p1"})
    for j in range(27):  # p1 read after p0, frame by frame, behind until its end
        found += update([node(out + 5.0 * j + 1, [busy(60)], name="nodeB"),
                         node(out + 5.0 * j + 2 - 600, [busy(60)], name="nodeD")], wall,
                        {"p1"} if j < 26 else set())
    found += update([node(wall, [busy(60)], name="nodeA")], wall + 1, set())
    found += d.tick(wall + 2)
    assert [f.node for f in found if f.rule == "node_silent"] == []
