"""A node gone for good takes every open alert of it along when it is forgotten (no frame
for ``FORGET_S``), not its ``node_silent`` alone: a GPU heat alert, a stuck GPU, an XID
latched as an autoscaler removed it, or a node whose agent stopped cleanly and never
came back, stayed open for ever and was re-sent to Alertmanager every minute. Each one
resolves once, saying it was forgotten, in the store and at the sinks; a rack whose
every node is forgotten has its rack alerts resolved the same way. A processor started
after that loads none of them back."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path

from fleetwatch.frame import AGENT_STOPPED, Frame, HostReading
from fleetwatch.models import FORGOTTEN, Finding
from fleetwatch.models.node_silence import FORGET_S, NodeSilence
from fleetwatch.models.thermal import ThermalLimits
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node

T0 = 1_790_000_000.0
ALL = ("pending", "firing", "resolved")


def forgotten(name: str, ts: float, scope: str = "node", rack: str = "r1") -> Finding:
    return Finding("node_silent", "c", rack, "" if scope == "rack" else name, None, ts,
                   FORGET_S, "no frame for 7 days: forgotten", "critical",
                   evidence={FORGOTTEN: 1.0}, scope=scope, resolves=True)  # type: ignore[arg-type]


def opened(book: AlertBook, findings: Sequence[Finding]) -> None:
    book.apply(book.observe([], findings))


def test_forgetting_a_node_resolves_every_open_alert_of_it_and_no_other() -> None:
    book = AlertBook(requirements={"gpu_temp_critical": ("gpu_temp_c",)})
    opened(book, [
        Finding("gpu_temp_critical", "c", "r1", "gone", 3, 100.0, 99.0, "hot", "critical"),
        Finding("gpu_xid", "c", "r1", "gone", 1, 100.0, 79.0, "XID 79", hold_s=3600.0),
        Finding("node_nvml_down", "c", "r1", "gone", None, 100.0, 1.0, "NVML", scope="node"),
        Finding("gpu_temp_critical", "c", "r1", "stays", 0, 100.0, 99.0, "hot", "critical"),
        Finding("gpu_temp_critical", "d", "r1", "gone", 0, 100.0, 99.0, "hot", "critical")])
    changes = book.observe([], [forgotten("gone", 100.0 + FORGET_S)])
    assert sorted((a.rule, a.device, a.state) for a in changes) == [
        ("gpu_temp_critical", "gpu3", "resolved"), ("gpu_xid", "gpu1", "resolved"),
        ("node_nvml_down", "host", "resolved")]
    assert all(a.cluster == "c" and a.node == "gone" for a in changes)
    assert all("forgotten" in a.resolution and a.evidence[FORGOTTEN] == 1.0
               for a in changes)
    book.apply(changes)
    assert sorted((a.cluster, a.node) for a in book.open) == [("c", "stays"), ("d", "gone")]
    assert book.observe([], [forgotten("gone", 200.0 + FORGET_S)]) == []  # once


def test_forgetting_a_rack_resolves_its_rack_alerts_only() -> None:
    book = AlertBook()
    opened(book, [
        Finding("rack_silent", "c", "r1", "", None, 100.0, 6.0, "rack", scope="rack"),
        Finding("rack_inlet_hot", "c", "r1", "", None, 100.0, 40.0, "warm", scope="rack"),
        Finding("rack_silent", "c", "r2", "", None, 100.0, 6.0, "rack", scope="rack")])
    changes = book.observe([], [forgotten("", 100.0 + FORGET_S, scope="rack")])
    assert sorted((a.rule, a.device) for a in changes) == [
        ("rack_inlet_hot", "rack:r1"), ("rack_silent", "rack:r1")]
    assert all(a.state == "resolved" and "forgotten" in a.resolution for a in changes)


def last(f: Frame) -> Frame:
    """The frame an agent sends as it stops cleanly."""
    return dataclasses.replace(f, host=HostReading({**f.host.metrics, AGENT_STOPPED: 1.0}))


class Heard:
    """A notifier (``AlertHook``): every change sent, and what is open after each batch."""

    def __init__(self) -> None:
        self.sent: list[Alert] = []
        self.current: list[Alert] = []
        self.adopted: list[Alert] = []

    def send(self, changes: Sequence[Alert], now: float | None = None,
             current: Iterable[Alert] = (), stored: bool = True,
             clearing: object = None) -> None:
        self.sent += changes
        self.current = list(current)

    def adopt(self, alerts: Iterable[Alert]) -> None:
        self.adopted += alerts

    def forget(self, nodes: Iterable[str]) -> None:
        pass


def fleet(processor: Processor, start: float, until: float) -> float:
    """"stays" reports all along; "gone" runs hot and vanishes after an hour; "quit" runs
    hot and its agent stops cleanly after an hour (from ``T0``). Every node in rack r1 but "lone",
    alone in rack r9 and gone with "gone"."""
    t = start
    while t < until:
        frames = [node(t, [busy(60)], name="stays")]
        if t < T0 + 3600.0:
            frames += [node(t, [busy(99)], name="gone"), node(t, [busy(60)], name="lone",
                                                              rack="r9")]
            hot = node(t, [busy(99)], name="quit")
            frames.append(last(hot) if t + 600.0 >= T0 + 3600.0 else hot)
        processor.process(frames)
        t += 600.0
    processor.flush()
    return t


def test_a_forgotten_node_has_every_alert_resolved_in_the_store_and_the_sinks(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fw.db")
    heard = Heard()
    processor = Processor(store, detectors=[NodeSilence(), ThermalLimits()], notifier=heard)
    t = fleet(processor, T0, T0 + 3600.0)
    # A rack_silent of r9 as an older release left it (its one node went with "gone").
    processor.alerts.apply(processor.alerts.observe([], [Finding(
        "rack_silent", "c", "r9", "", None, t, 1.0, "rack r9 silent", scope="rack")]))
    store.write_alerts(processor.alerts.open)
    hot = {(a.node, a.rule) for a in store.alerts()}
    assert {("gone", "gpu_temp_critical"), ("quit", "gpu_temp_critical")} <= hot
    fleet(processor, t, T0 + FORGET_S + 2 * 3600.0)
    ended = [a for a in store.alerts(ALL) if a.node in ("gone", "quit", "lone", "")]
    assert ended and all(a.state == "resolved" for a in ended)
    for a in ended:
        if a.rule != "node_silent" or a.node == "":
            assert "forgotten" in a.resolution and a.evidence[FORGOTTEN] == 1.0, a
    assert {(a.node, a.rule) for a in store.alerts()} == set()  # nothing open
    # The sinks heard each resolution once, and re-send none of them.
    resolved = [a.id for a in heard.sent if a.state == "resolved"]
    assert sorted(resolved) == sorted({a.id for a in ended})
    assert [a for a in heard.current if a.node != "stays"] == []
    store.close()
    # A processor started afterwards brings none of them back to life.
    store = SqliteStore(tmp_path / "fw.db")
    heard = Heard()
    processor = Processor(store, detectors=[NodeSilence(), ThermalLimits()], notifier=heard)
    processor.process([node(T0 + FORGET_S + 3 * 3600.0, [busy(60)], name="stays")])
    processor.flush()
    assert heard.adopted == [] and processor.alerts.open == []
    assert [a for a in heard.sent if a.node != "stays"] == []
    store.close()


def rack_alert(rack: str, updated: float) -> Alert:
    return Alert(f"rack_silent/c//rack:{rack}/1", "rack_silent", "critical", "c", rack, "",
                 f"rack:{rack}", "firing", updated - 600.0, updated, 2.0, f"rack {rack} silent",
                 fired_ts=updated - 600.0)


def test_a_rack_alert_taken_over_at_a_restart_ends_once_its_rack_is_forgotten(
        tmp_path: Path) -> None:
    """A restart after the rack's nodes left: no node of it is known to the new processor,
    so none will be forgotten to end its rack alert; it ends ``FORGET_S`` after it was
    last updated, unless a node of its rack is heard (then its frames judge it)."""
    t = T0 + FORGET_S
    store = SqliteStore(tmp_path / "fw.db")
    store.write_alerts([rack_alert("r9", T0 - 3600.0), rack_alert("r8", t - 2 * 86400.0),
                        rack_alert("r7", T0 - 3600.0)])
    heard = Heard()
    processor = Processor(store, detectors=[NodeSilence(), ThermalLimits()], notifier=heard)
    for k in range(6):
        processor.process([node(t + 60.0 * k, [busy(60)], name="stays"),
                           node(t + 60.0 * k, [busy(60)], name="back", rack="r7")])
    processor.flush()
    # Loaded and re-sent at first; r9 ends as forgotten, r8 (updated 2 days ago) stays.
    assert {a.rack for a in heard.adopted} == {"r9", "r8", "r7"}
    assert sorted(a.rack for a in store.alerts()) == ["r8"]
    (r9,) = [a for a in store.alerts(ALL) if a.rack == "r9"]
    assert "forgotten" in r9.resolution and r9.evidence[FORGOTTEN] == 1.0
    (r7,) = [a for a in store.alerts(ALL) if a.rack == "r7"]
    assert "forgotten" not in r7.resolution  # its node is back: ended by its frames
    assert sorted(a.rack for a in heard.sent if a.state == "resolved") == ["r7", "r9"]
    store.close()
