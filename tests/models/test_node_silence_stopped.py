"""A node whose agent stopped cleanly (its last frame says so: ``host_agent_stopped``, sent
on SIGTERM/SIGINT/SIGHUP, a scale-down) is not paged silent, nor is its rack; its stop is a
``node_state`` event; frames again: it is simply back. A node that stops without that frame
(a crash, SIGKILL, power or network lost) is paged as before. (The r24 churn run: every
node an autoscaler removed paged node_silent critical.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgpack

from fleetwatch.codec import Decoder, encode
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import AGENT_STOPPED, Frame, HostReading
from fleetwatch.models.node_silence import FORGET_S, NodeSilence
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.node_states import NodeStates
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node


def last(f: Frame) -> Frame:
    """The frame an agent sends as it stops cleanly."""
    return dataclasses.replace(f, host=HostReading({**f.host.metrics, AGENT_STOPPED: 1.0}))


def fleet(stop: dict[str, float], back: dict[str, float] | None = None,
          until: float = 2000.0, rack_min: int = 2) -> list:
    """Nodes a..d of one rack every 5 s; each in ``stop`` sends no frame from then (its name
    upper-case: stopped cleanly, its last frame then says so), until ``back``."""
    d = NodeSilence(DetectorsConfig(rack_silent_min_nodes=rack_min))
    book = AlertBook(requirements={"node_silent": ()})
    changes = []
    t = 1000.0
    while t < until:
        frames = []
        for n in ("a", "b", "c", "d"):
            end = stop.get(n.upper(), stop.get(n))
            again = (back or {}).get(n)
            if end is None or t < end or (again is not None and t >= again):
                frames.append(node(t, [busy(60)], name=n))
            elif t == end and n.upper() in stop:  # a clean stop: its last frame says so
                frames.append(last(node(t, [busy(60)], name=n)))
        got = book.observe(frames, d.update(frames))
        book.apply(got)
        changes += got
        t += 5.0
    return [(a.rule, a.node or a.device, a.state) for a in changes]


def test_a_clean_stop_pages_nobody_a_crash_still_pages() -> None:
    # A and B stop cleanly at 1200 (scale-down); c dies at 1200 with no last frame.
    seen = fleet({"A": 1200.0, "B": 1200.0, "c": 1200.0})
    assert ("node_silent", "c", "firing") in seen
    assert not [s for s in seen if s[1] in ("a", "b")]
    assert not [s for s in seen if s[0] == "rack_silent"]  # one node dead is no rack


def test_a_whole_rack_scaled_down_cleanly_is_no_rack_silent() -> None:
    assert fleet({"A": 1200.0, "B": 1200.0, "C": 1200.0}) == []


def test_a_stopped_node_back_then_crashing_is_paged() -> None:
    d = NodeSilence()
    book = AlertBook(requirements={"node_silent": ()})
    fired = []
    for k in range(400):
        t = 1000.0 + 5 * k
        frames = [node(t, [busy(60)], name="a")]
        if k == 20:
            frames.append(last(node(t, [busy(60)], name="b")))
        elif k < 20 or 200 <= k < 250:  # b stopped, started again, then crashed at 2250
            frames.append(node(t, [busy(60)], name="b"))
        changes = book.observe(frames, d.update(frames))
        book.apply(changes)
        fired += [a.updated_ts for a in changes if a.node == "b" and a.state == "firing"
                  and a.fired_ts == a.updated_ts]
    assert len(fired) == 1 and 2250.0 < fired[0] <= 2250.0 + 65.0


def test_a_stopped_node_is_forgotten_after_forget_s() -> None:
    d = NodeSilence()
    d.update([node(1000.0, [busy(60)], name="a"), last(node(1000.0, [busy(60)], name="b"))])
    t, said = 1000.0, []
    while t < 1000.0 + FORGET_S + 3600.0:
        t += 600.0
        said += d.update([node(t, [busy(60)], name="a")])
    assert [w[2] for w in d._where] == ["a"]
    # Never paged (warned only: ``agent_stopped``); forgotten all the same, so that an
    # alert of its GPUs left open ends.
    assert {f.severity for f in said if f.rule == "agent_stopped"} == {"warning"}
    [forgot] = [f for f in said if f.rule != "agent_stopped"]
    assert forgot.node == "b" and forgot.resolves and forgot.evidence["forgotten"] == 1.0


def test_node_states_say_stopped_then_back() -> None:
    s = NodeStates()
    (stop,) = s.update([last(node(100.0, [], name="n9"))], [])
    assert (stop.kind, stop.value, stop.ts) == ("node_state", "stopped", 100.0)
    assert "agent stopped at" in stop.text and "not paged" in stop.text
    assert s.update([node(105.0, [], name="n1")], []) == []
    (back,) = s.update([node(400.0, [], name="n9")], [])
    assert (back.value, back.ts) == ("back", 400.0)
    assert s.update([node(405.0, [], name="n9")], []) == []


def test_a_processor_stores_the_stop_and_no_alert(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fw.db")
    processor = Processor(store, detectors=[NodeSilence()])
    for k in range(60):
        t = 1_000.0 + 5 * k
        frames = [node(t, [busy(60)], name="n1")]
        if k < 10:
            frames.append(node(t, [busy(60)], name="n9"))
        elif k == 10:
            frames.append(last(node(t, [busy(60)], name="n9")))
        processor.process(frames)
    processor.flush()
    assert store.alerts() == []
    events = store.events(0, 10_000_000_000_000)
    assert [(e.node, e.value) for e in events if e.kind == "node_state"] == [("n9", "stopped")]


def test_a_processor_without_the_metric_decodes_the_last_frame() -> None:
    """An older processor (its catalogue lacks the id) keeps the frame, less that metric."""
    body = msgpack.unpackb(encode(last(node(1.8e9, [busy(60)], name="n9"))),
                           strict_map_key=False)
    assert 217 in body[7][0]
    body[7][0][9217] = body[7][0].pop(217)  # as an id this catalogue does not know
    dec = Decoder()
    f = dec.decode(msgpack.packb(body, use_bin_type=True))
    assert f.node == "n9" and AGENT_STOPPED not in f.host.metrics
    assert dec.unknown == [("host", 9217)]
