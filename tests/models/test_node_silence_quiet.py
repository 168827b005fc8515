"""The silent-node rule when a node flaps (dies again soon after an outage) and when the
whole fleet goes quiet at once (no frame at all: the stream's clock stands still).

Frames are fed as a live processor does: ``wall`` is the processor's clock, a little
after the frame's time; ``tick`` is called on the polls that bring nothing."""

from __future__ import annotations

from fleetwatch.models import Finding
from fleetwatch.models.node_silence import NodeSilence
from tests.models.helpers import busy, node

NODES = tuple(f"node-{k:02d}" for k in range(10))


def live(d: NodeSilence, t: float, names: tuple[str, ...]) -> list[Finding]:
    return d.update([node(t, [busy(60)], name=n) for n in names], wall=t + 0.1)


def first_page(d: NodeSilence, start: float, end: float, names: tuple[str, ...],
               who: str) -> tuple[float, str] | None:
    """Frames of ``names`` every 5 s from ``start``; the first page of ``who``."""
    t = start
    while t < end:
        for f in live(d, t, names):
            if f.node == who:
                return f.ts, f.message
        t += 5.0
    return None


def test_a_node_that_dies_again_soon_after_an_outage_is_paged_as_soon_as_the_first_time(
        ) -> None:
    rest = tuple(n for n in NODES if n != "node-03")
    for outage, back in ((3600.0, 60.0), (3600.0, 180.0), (600.0, 60.0)):
        d = NodeSilence()
        first_page(d, 1000, 1300, NODES, "nobody")              # learn: every 5 s
        died = 1300.0
        page = first_page(d, died, died + outage, rest, "node-03")
        assert page is not None and page[0] - died <= 65
        first_page(d, died + outage, died + outage + back, NODES, "nobody")  # back
        again = died + outage + back
        page = first_page(d, again, again + 900, rest, "node-03")
        assert page is not None, (outage, back)
        assert page[0] - again <= 65, (outage, back, page)
        assert "it reports every 5 s" in page[1]


def test_an_agent_that_now_reports_slowly_is_learned_after_two_long_gaps() -> None:
    d = NodeSilence()
    first_page(d, 1000, 1300, ("a", "b"), "nobody")
    pages = []
    for k in range(12):            # "b" now reports every 120 s; "a" still every 5 s
        t0 = 1300 + 120.0 * k
        for j in range(24):
            t = t0 + 5.0 * j
            pages += [(k, f.node) for f in live(d, t, ("a", "b") if j == 0 else ("a",))]
    # The first slow gap is taken as an outage (paged), the second one teaches it.
    assert pages and max(k for k, _ in pages) <= 2
    assert {n for _, n in pages} == {"b"}


def quiet(d: NodeSilence, start: float, seconds: int, every: float = 1.0
          ) -> list[tuple[float, Finding]]:
    """Polls that bring nothing, every ``every`` s of the processor's clock."""
    out = []
    for k in range(1, int(seconds / every) + 1):
        wall = start + every * k
        out += [(wall, f) for f in d.tick(wall)]
    return out


def test_when_every_node_goes_quiet_each_is_paged_on_the_processors_clock() -> None:
    d = NodeSilence()
    first_page(d, 1000, 1300, NODES, "nobody")       # last frames at 1295
    found = quiet(d, 1295.1, 120)
    first = {}
    for wall, f in found:
        first.setdefault(f.node, (wall, f))
    rack = first.pop("")                             # their rack, down: one rack_silent
    assert rack[1].rule == "rack_silent" and 60 < rack[0] - 1295 <= 62
    assert set(first) == set(NODES)                  # one finding per node
    for wall, f in first.values():
        assert 60 < wall - 1295 <= 62                 # silent_min_s after their last frame
        assert f.rule == "node_silent" and f.severity == "critical"
        assert f.ts <= wall and 60 < f.ts - 1295 <= 62
        assert "has sent nothing for 6" in f.message and "it reports every 5 s" in f.message
    # The fleet comes back, one node does not: it is still silent, the others are not.
    back = live(d, 1295 + 125, NODES[1:])
    assert [f.node for f in back] == [NODES[0]]
    assert back[0].value > 120


def test_a_one_node_deployment_whose_node_dies_is_paged() -> None:
    d = NodeSilence()
    first_page(d, 1000, 1100, ("only",), "nobody")
    found = quiet(d, 1095.1, 90, every=0.5)
    assert [f.node for _, f in found][:1] == ["only"]
    assert 60 < found[0][0] - 1095 <= 61


def test_a_processor_that_was_stopped_itself_pages_nobody_for_its_own_pause() -> None:
    """SIGSTOP for 10 min, then a poll that brings nothing (rejoining its group) and the
    backlog: only the time spent listening counts."""
    d = NodeSilence()
    first_page(d, 1000, 1300, NODES, "nobody")
    assert quiet(d, 1295.1, 3) == []
    assert d.tick(1295.1 + 600) == []                # the pause counts for TICK_GAP_S only
    assert quiet(d, 1295.1 + 600, 20) == []
    # Its backlog (frames of the whole pause) arrives: nobody was silent.
    assert first_page(d, 1300, 1900, NODES, "anybody") is None


def test_a_short_quiet_between_polls_changes_nothing() -> None:
    d = NodeSilence()
    page = None
    for k in range(120):   # 10 min; a poll that brings nothing between every two frames
        t = 1000 + 5.0 * k
        names = NODES if k < 60 else NODES[1:]
        page = page or next((f for f in live(d, t, names) if f.node == NODES[0]), None)
        assert d.tick(t + 2.5) == [] or k >= 60
    assert page is not None and 60 < page.ts - 1295 <= 66


def test_a_node_taken_over_is_given_its_limit_to_report_before_it_is_paged() -> None:
    """A partition taken over after the brokers were away: the store's last frame of the
    node is 2 minutes old, its spooled frames are on their way (they come 10 s later)."""
    d = NodeSilence()
    first_page(d, 1000, 1300, ("a", "c"), "nobody")
    d.expect([("c", "r1", "b", 1170.0)])
    assert first_page(d, 1300, 1310, ("a", "c"), "b") is None
    d.update([node(1170.0 + 5 * k, [busy(60)], name="b") for k in range(30)], wall=1311)
    assert first_page(d, 1310, 1600, ("a", "b", "c"), "b") is None


def test_a_node_taken_over_that_stays_silent_is_paged_a_limit_after_the_takeover() -> None:
    d = NodeSilence()
    first_page(d, 1000, 1300, ("a", "c"), "nobody")
    d.expect([("c", "r1", "b", 1170.0)])
    page = first_page(d, 1300, 1600, ("a", "c"), "b")
    assert page is not None and 60 < page[0] - 1295 <= 66
    assert "has sent nothing for 1" in page[1]       # counted from its last stored frame


def test_with_the_fleet_quiet_a_node_taken_over_is_paged_too() -> None:
    d = NodeSilence()
    first_page(d, 1000, 1300, ("a", "c"), "nobody")
    d.expect([("c", "r1", "b", 1290.0)])
    found = {f.node for _, f in quiet(d, 1295.1, 200) if f.rule == "node_silent"}
    assert found == {"a", "b", "c"}


def test_a_processor_that_starts_while_every_node_is_silent_pages_nobody_yet() -> None:
    """A known limit: with no frame at all it cannot tell its own cluster's nodes from
    another cluster's that the store names (one store, several clusters)."""
    d = NodeSilence()
    d.expect([("c", "r1", "a", 900.0), ("c", "r1", "b", 900.0)])
    assert quiet(d, 1000.0, 300) == []


def test_time_the_processor_could_not_hear_counts_for_nothing_once_it_hears_again() -> None:
    """The brokers are away for a minute (``deaf`` on the polls meanwhile), then answer
    again: the first poll after that, empty, adds none of the minute (it used to add up
    to ``TICK_GAP_S``), so the quiet before and after never reach the limit (60 s)."""
    d = NodeSilence()
    first_page(d, 1000, 1300, NODES, "nobody")       # last frames at 1295
    assert quiet(d, 1295.1, 57) == []                # 57 s quiet while listening
    d.deaf()                                         # the brokers away: nothing heard
    assert quiet(d, 1295.1 + 60, 2) == []            # 2 s more once they answer: 59 s
    found = quiet(d, 1295.1 + 62, 3)                 # and then truly quiet: paged
    assert {f.node for _, f in found if f.rule == "node_silent"} == set(NODES)
    assert all(wall >= 1295.1 + 63 for wall, _ in found)


def test_a_tick_as_of_the_brokers_last_answer_counts_no_time_twice() -> None:
    """The processor asks as of the brokers' last answer (``wall`` behind its clock): a
    frame's time is never counted again from an earlier tick."""
    d = NodeSilence()
    first_page(d, 1000, 1300, NODES, "nobody")
    assert d.tick(1295.1 - 3) == []                  # an answer before the last frame
    assert quiet(d, 1295.1, 58) == []                # 58 s: not 61
