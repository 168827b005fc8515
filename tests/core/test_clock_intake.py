"""Frames against the processor's clock, at its intake (``Processor.handle``), into a real
SQLite store: a frame far ahead is dead-lettered before the store, the ledger and the
detectors see it; a node whose clock is off is said once and shown in a metric; a frame
the store refuses moves neither the ledger nor any detector; the silent-node rule's
"now" is never later than the processor's clock."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models import Finding
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Alert, StoreRejected
from fleetwatch.pipeline.store.sqlite import SqliteStore

NOW = 1_795_757_000.0          # the processor's clock in these tests
FAR = 4_084_473_600.0          # 2099-06-07, as the codec accepts


def frame(node: str, ts: float, power: float = 300.0) -> Frame:
    return Frame("c1", "r1", node, ts, (GpuReading(0, f"GPU-{node}", "H100",
                                                   {"gpu_temp_c": 50.0, "gpu_power_w": power}),))


def messages(frames: Sequence[Frame], start: int = 0) -> list[Message]:
    return [Message(encode(f), f.node.encode(), "frames", 0, start + i)
            for i, f in enumerate(frames)]


class Lagless:
    def lag(self) -> int:
        return 0


class Seen:
    """A detector that remembers the frames it was given."""

    name = "seen"
    rules: dict[str, tuple[str, ...]] = {}

    def __init__(self) -> None:
        self.ts: list[float] = []

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        self.ts.extend(f.ts for f in frames)
        return []


def samples_at(db: Path, ts: float) -> int:
    store = SqliteStore(db, read_only=True)
    try:
        return len(store.range("gpu_temp_c", int(ts * 1000) - 1, int(ts * 1000) + 1))
    finally:
        store.close()


def ledger_j(store: SqliteStore, node: str) -> tuple[float, float]:
    rows = [r for r in store.energy(NOW - 86400, NOW + 86400, cluster="c1") if r.node == node]
    return sum(r.energy_j for r in rows), sum(r.missing_s for r in rows)


def test_a_frame_far_ahead_is_dead_lettered_before_store_ledger_and_detectors(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "s.db"
    store, seen = SqliteStore(db), Seen()
    p = Processor(store, [seen], clock=lambda: NOW + 600)
    good = [frame("n1", NOW + 5.0 * k) for k in range(60)]
    with caplog.at_level(logging.INFO):
        p.handle(messages(good[:30]))
        p.handle(messages([frame("n1", FAR)], 30))
        offset = p.clocks.offsets[("c1", "n1")]         # the metric shows the node, while off
        p.handle(messages(good[30:], 31))
    assert offset == pytest.approx(FAR - NOW - 600) and p.clocks.offsets == {}
    assert p.stats.by_reason == {"clock": 1} and p.stats.dead_letters == 1
    assert samples_at(db, FAR) == 0 and samples_at(db, NOW + 5.0 * 59) == 1
    assert FAR not in seen.ts and len(seen.ts) == 60
    energy, missing = ledger_j(store, "n1")
    store.close()
    assert energy == pytest.approx(300.0 * 5 * 59) and missing == 0.0   # every interval
    said = [r.getMessage() for r in caplog.records]
    reason = next(m for m in said if "max_clock_ahead_s" in m)
    assert "c1/r1/n1" in reason and "2099-" in reason and "days ahead" in reason
    assert "time sync" in reason
    # The node itself is said once when its clock goes off, once when it is right again.
    assert sum("Said once per node" in m for m in said) == 1
    assert sum("in step with this processor's clock again" in m for m in said) == 1


def test_a_bound_of_zero_takes_frames_of_any_time(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    p = Processor(SqliteStore(db), [], max_clock_ahead_s=0, clock=lambda: NOW)
    p.handle(messages([frame("n1", NOW), frame("n1", FAR)]))
    p.store.close()
    assert p.stats.dead_letters == 0 and samples_at(db, FAR) == 1


def test_a_node_a_minute_ahead_is_stored_said_once_and_in_the_metric(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = [NOW]
    p = Processor(SqliteStore(tmp_path / "s.db"), [], clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING):
        for k in range(10):
            clock[0] = NOW + 5.0 * k
            p.handle(messages([frame("ok", clock[0]), frame("fast", clock[0] + 60)], 2 * k))
    p.store.close()
    said = [r.getMessage() for r in caplog.records if "Said once" in r.getMessage()]
    assert said == [said[0]] and "c1/r1/fast: its clock is 60 s ahead" in said[0]
    assert p.stats.dead_letters == 0 and p.stats.frames == 20
    assert p.stats.clock_ahead == 10
    assert p.clocks.offsets == {("c1", "fast"): pytest.approx(60.0)}
    families = {m.name: m for m in ProcessorCollector(p, Lagless()).collect()}  # type: ignore

    (offset,) = families["fleetwatch_processor_node_clock_offset_seconds"].samples
    assert offset.labels == {"cluster": "c1", "node": "fast"}
    assert offset.value == pytest.approx(60.0)
    skewed = {s.labels["direction"]: s.value
              for s in families["fleetwatch_processor_clock_skewed_frames"].samples
              if s.name.endswith("_total")}
    assert skewed == {"ahead": 10, "behind": 0}


def test_a_node_steadily_behind_is_said_but_a_spool_flush_is_not(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = [NOW]
    p = Processor(SqliteStore(tmp_path / "s.db"), [], clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING):
        for k in range(40):
            clock[0] = NOW + 5.0 * k
            batch = [frame(n, clock[0]) for n in ("a", "b", "c")]
            batch.append(frame("slow", clock[0] - 900))              # a clock 15 min behind
            if k < 4:                                                # a spool flushing 10 min
                batch += [frame("flush", clock[0] - 600 + 150 * k + j) for j in range(0, 150, 5)]
            p.handle(messages(batch, 100 * k))
    p.store.close()
    said = [r.getMessage() for r in caplog.records if "Said once" in r.getMessage()]
    assert len(said) == 1 and "c1/r1/slow: its clock is 900 s behind" in said[0]
    assert p.clocks.offsets == {("c1", "slow"): pytest.approx(-900.0)}


class Refusing(SqliteStore):
    """A store that refuses frames stamped after 2090, as VictoriaMetrics refuses those
    past its retention, naming none of them (the processor bisects)."""

    def write(self, frames: Sequence[Frame]) -> int:
        if any(f.ts > 3.8e9 for f in frames):
            raise StoreRejected("cannot insert row with too big timestamp")
        return super().write(frames)


def test_a_frame_the_store_refuses_moves_neither_the_ledger_nor_a_detector(
        tmp_path: Path) -> None:
    store, seen = Refusing(tmp_path / "s.db"), Seen()
    p = Processor(store, [seen], max_clock_ahead_s=0, clock=lambda: NOW + 600)
    good = [frame("n1", NOW + 5.0 * k) for k in range(60)]
    p.handle(messages(good[:30]))
    p.handle(messages([good[30], frame("n1", FAR), good[31]], 30))
    p.handle(messages(good[32:], 33))
    assert p.stats.store_rejected == 1 and p.stats.by_reason == {"store": 1}
    assert FAR not in seen.ts and len(seen.ts) == 60
    assert p.stats.frames == 60
    energy, missing = ledger_j(store, "n1")
    store.close()
    assert energy == pytest.approx(300.0 * 5 * 59) and missing == 0.0


def test_live_silent_node_alerts_are_never_stamped_after_the_processors_clock(
        tmp_path: Path) -> None:
    # No bound at the intake: two of three nodes 2 h ahead reach the detector.
    clock = [NOW]
    p = Processor(SqliteStore(tmp_path / "s.db"), [NodeSilence()], max_clock_ahead_s=0,
                  clock=lambda: clock[0])
    for k in range(60):
        clock[0] = NOW + 2.0 * k
        p.handle(messages([frame("a", clock[0])] + [frame(n, clock[0] + 7200)
                                                     for n in ("b", "c")], 3 * k))
    p.store.close()
    assert [a for a in p.alerts.open if a.rule == "node_silent"] == []
    assert all(a.updated_ts <= clock[0] for a in p.alerts.open)


def test_a_stored_alert_stamped_in_the_future_resolves_once_its_node_is_heard(
        tmp_path: Path) -> None:
    # An older processor, whose "now" two agents 2 h ahead had moved, stored this alert.
    db = tmp_path / "s.db"
    store = SqliteStore(db)
    bogus = NOW + 7200
    store.write_alerts([Alert(
        id=f"node_silent/c1/a/host/{int(bogus * 1000)}", rule="node_silent", severity="critical",
        cluster="c1", rack="r1", node="a", device="host", state="firing", started_ts=bogus,
        updated_ts=bogus, fired_ts=bogus, value=60.0, message="a has sent nothing for 60 s")])
    clock = [NOW]
    p = Processor(store, [NodeSilence()], clock=lambda: clock[0])
    for k in range(5):
        clock[0] = NOW + 2.0 * k
        p.handle(messages([frame("a", clock[0]), frame("b", clock[0])], 2 * k))
    (alert,) = store.alerts(states=("firing", "resolved"))
    store.close()
    assert alert.state == "resolved" and alert.resolved_ts <= clock[0]


def test_a_node_off_that_goes_quiet_leaves_the_offset_metric_after_an_hour(
        tmp_path: Path) -> None:
    clock = [NOW]
    p = Processor(SqliteStore(tmp_path / "s.db"), [], clock=lambda: clock[0])
    p.handle(messages([frame("ok", NOW), frame("fast", NOW + 60)]))
    assert set(p.clocks.offsets) == {("c1", "fast")}
    clock[0] = NOW + 3601
    p.handle(messages([frame("ok", clock[0])], 2))
    p.store.close()
    assert p.clocks.offsets == {}


def test_same_named_nodes_of_two_clusters_have_their_own_clocks(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = [NOW]
    p = Processor(SqliteStore(tmp_path / "s.db"), [], clock=lambda: clock[0])

    def at(cluster: str, ts: float) -> Frame:
        return dataclasses.replace(frame("node001", ts), cluster=cluster)

    with caplog.at_level(logging.INFO, logger="fleetwatch.pipeline.intake"):
        for k in range(10):
            clock[0] = NOW + 5.0 * k
            p.handle(messages([at("c-east", clock[0] + 60), at("c-west", clock[0])], 2 * k))
    p.store.close()
    lines = [r.getMessage() for r in caplog.records if "node001" in r.getMessage()]
    # c-east's node001 is off, once; c-west's in step never makes it "back in step".
    assert len(lines) == 1 and "c-east/r1/node001: its clock is 60 s ahead" in lines[0]
    assert p.clocks.offsets == {("c-east", "node001"): pytest.approx(60.0)}
    families = {m.name: m for m in ProcessorCollector(p, Lagless()).collect()}  # type: ignore
    (offset,) = families["fleetwatch_processor_node_clock_offset_seconds"].samples
    assert offset.labels == {"cluster": "c-east", "node": "node001"}
