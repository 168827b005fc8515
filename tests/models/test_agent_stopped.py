"""A node whose agent stopped cleanly and did not come back within
``detectors.agent_stopped_grace_s``: ``agent_stopped`` (warning, to chat), naming the node,
when it stopped and what to do; it ends at the node's next frame, or when the node is
forgotten. A DaemonSet rollout whose new agent pod never starts (CrashLoopBackOff) is a
clean stop (SIGTERM) and was never said at all (round 25, k8s). 0: never (an autoscaled
pool). The node is still not silent and not in a rack."""

from __future__ import annotations

from fleetwatch.config import DetectorsConfig
from fleetwatch.models import FORGOTTEN
from fleetwatch.models.node_silence import FORGET_S, NodeSilence
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node
from tests.models.test_node_silence_stopped import last

RULES = {"node_silent": (), "agent_stopped": (), "rack_silent": ()}


def run(d: NodeSilence, stop: dict[str, float], back: dict[str, float], until: float,
        step: float = 10.0) -> list[tuple[str, str, str, float, str]]:
    """Nodes a, b, c (one rack) every ``step`` s; each in ``stop`` stops cleanly then, until
    ``back``: the alert changes, (rule, node, state, when, message)."""
    book = AlertBook(requirements=RULES)
    out = []
    t = 1000.0
    while t < until:
        frames = []
        for n in ("a", "b", "c"):
            end, again = stop.get(n), back.get(n)
            if end is None or t < end or (again is not None and t >= again):
                frames.append(node(t, [busy(60)], name=n))
            elif t == end:
                frames.append(last(node(t, [busy(60)], name=n)))
        got = book.observe(frames, d.update(frames, wall=t))
        book.apply(got)
        out += [(a.rule, a.node, a.state, a.started_ts, a.message) for a in got
                if not [o for o in out if o[:3] == (a.rule, a.node, a.state)]]
        t += step
    return out


def test_an_agent_not_back_within_its_grace_warns_and_ends_at_its_next_frame() -> None:
    d = NodeSilence(DetectorsConfig(agent_stopped_grace_s=900.0))
    seen = run(d, {"b": 1200.0, "c": 1200.0}, {"b": 2500.0}, 3000.0)
    assert [(r, n, s) for r, n, s, _, _ in seen] == [
        ("agent_stopped", "b", "firing"), ("agent_stopped", "c", "firing"),
        ("agent_stopped", "b", "resolved")]
    rule, _, _, started, message = seen[0]
    assert started == 1200.0 + 900.0                       # its grace after its stop
    assert "1970-01-01 00:20:00 UTC" in message             # when it stopped
    assert "sent nothing since its agent stopped cleanly" in message


def test_the_warning_says_what_to_do_and_is_no_page() -> None:
    d = NodeSilence(DetectorsConfig(agent_stopped_grace_s=60.0))
    found = [f for k in range(40) for f in d.update(
        [node(1000.0 + 10 * k, [busy(60)], name="a")]
        + ([last(node(1000.0 + 10 * k, [busy(60)], name="b"))] if k == 5 else [])
        + ([node(1000.0 + 10 * k, [busy(60)], name="b")] if k < 5 else []),
        wall=1000.0 + 10 * k)]
    stopped = [f for f in found if f.rule == "agent_stopped"]
    assert stopped and {f.severity for f in stopped} == {"warning"}
    assert {f.node for f in stopped} == {"b"}
    assert not [f for f in found if f.rule in ("node_silent", "rack_silent")]
    assert "removed on purpose" in stopped[0].action
    assert "DaemonSet" in stopped[0].action and "systemctl" in stopped[0].action


def test_zero_never_warns() -> None:
    d = NodeSilence(DetectorsConfig(agent_stopped_grace_s=0.0))
    assert run(d, {"b": 1200.0}, {}, 5000.0) == []


def test_the_default_warns_after_a_quarter_hour() -> None:
    seen = run(NodeSilence(), {"b": 1200.0}, {}, 1200.0 + 960.0, step=20.0)
    assert [(r, n, s) for r, n, s, _, _ in seen] == [("agent_stopped", "b", "firing")]
    assert seen[0][3] == 1200.0 + 900.0


def test_a_forgotten_stopped_node_ends_its_warning() -> None:
    d = NodeSilence(DetectorsConfig(agent_stopped_grace_s=60.0))
    d.update([node(1000.0, [busy(60)], name="a"), last(node(1000.0, [busy(60)], name="b"))],
             wall=1000.0)
    firing = d.update([node(1100.0, [busy(60)], name="a")], wall=1100.0)
    assert [f.rule for f in firing if f.node == "b"] == ["agent_stopped"]
    later = d.update([node(1000.0 + FORGET_S + 10, [busy(60)], name="a")],
                     wall=1000.0 + FORGET_S + 10)
    ends = [f for f in later if f.node == "b"]
    assert ends and all(f.resolves and f.evidence.get(FORGOTTEN) for f in ends)
