"""A store that refuses records for good never wedges the processor, nor blinds its alerts.

Over the in-process bus and a real SQLite store with one refusal injected at a
time: the events write, the alert write, the energy ledger write refused for
good (``StoreRejected``: InfluxDB's series limit, a field type conflict) are
counted and said, the rest stored, the batch committed and its alerts sent;
frames the store refuses for its own reasons are still judged; frames refused
for what they are (their time) are not.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.refusals import partial_dropped, write_what_is_taken
from fleetwatch.pipeline.store.base import StoreRejected
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import DEAD, TOPIC, Running, send, wait_for
from tests.store.helpers import stored

T0 = time.time() - 600
LIMIT = ('partial write: max-series-per-database limit exceeded: (2000) dropped=3')


def frame(node: str, ts: float, temp: float = 50.0, job: str | None = None) -> Frame:
    return Frame("c1", "r1", node, ts, (GpuReading(0, f"GPU-{node}", "H100",
                                                   {"gpu_temp_c": temp, "gpu_power_w": 300.0},
                                                   job=job),))


def test_records_refused_are_bisected_and_the_rest_stored() -> None:
    taken: list[int] = []

    def write(records: list[int]) -> None:
        if 3 in records or 6 in records:
            raise StoreRejected(f"HTTP 400: refused {records}")
        taken.extend(records)

    first = StoreRejected("HTTP 400: refused all")
    refused = write_what_is_taken(write, list(range(8)), first)
    assert sorted(taken) == [0, 1, 2, 4, 5, 7]
    assert sum(n for n, _ in refused) == 2
    # InfluxDB stored the rest of a partial write itself: nothing is asked again.
    assert partial_dropped(LIMIT) == 3
    assert write_what_is_taken(write, [3, 6], StoreRejected(LIMIT)) == [(3, LIMIT)]
    assert partial_dropped("HTTP 400: unable to parse") is None


class Refusing(SqliteStore):
    """SQLite that refuses, for good, the records named in ``refuse``."""

    refuse: set[str] = set()

    def write_events(self, events):  # type: ignore[override]
        if "events" in self.refuse and any(e.kind == "job_start" for e in events):
            raise StoreRejected(f"http://influx refused {len(events)} lines: HTTP 400: "
                                f"{{\"error\":\"{LIMIT}\"}}")
        super().write_events(events)

    def write_alerts(self, alerts):  # type: ignore[override]
        if "alerts" in self.refuse:
            raise StoreRejected("HTTP 400: field type conflict on fleetwatch_alert")
        super().write_alerts(alerts)

    def write_energy(self, rows, states):  # type: ignore[override]
        if "energy" in self.refuse and rows:
            raise StoreRejected("HTTP 400: max-values-per-tag limit exceeded")
        super().write_energy(rows, states)


@pytest.mark.parametrize("what,record", [("events", "events"),
                                         ("alerts", "alert changes"),
                                         ("energy", "energy ledger rows")])
def test_a_refused_record_write_neither_wedges_nor_silences(
        tmp_path: Path, what: str, record: str, caplog: pytest.LogCaptureFixture) -> None:
    Refusing.refuse = {what}
    bus = MemoryBus()
    db = tmp_path / "s.db"
    store = Refusing(db)
    processor = Processor(store, [GpuTemperatureLimit(85.0, 0.0)])
    frames = [frame("n1", T0 + i, 95.0, job=f"job-{i // 10}") for i in range(30)]
    caplog.set_level(logging.WARNING, "fleetwatch.pipeline.processor")
    with Running(bus, processor, batch=10) as run:
        send(bus, frames)
        wait_for(lambda: bus._committed.get((TOPIC, "g")) == 30)
        assert run.thread.is_alive()
    assert stored(db) == 30 * 2
    assert processor.stats.errors == 0
    assert processor.stats.frames == 30
    # The alert is judged and sent whatever the store says of the records.
    assert [a.rule for a in processor.alerts.open] == ["gpu_temp_high"]
    assert processor.stats.records_refused.get(record, 0) > 0
    said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert said and record in said[0] and "for good" in said[0]
    if what == "events":
        assert "max-series-per-database" in said[0]  # what to do about it


class ServerRefusing(SqliteStore):
    """Refuses the frames of node ``bad`` as a server does for its own reason (a field
    another writer typed integer), or, with ``about_frames``, for what they are."""

    about_frames = False

    def write(self, frames):  # type: ignore[override]
        if any(f.node == "bad" for f in frames):
            raise StoreRejected(
                'HTTP 400: {"error":"partial write: field type conflict: input field '
                '\\"temp_c\\" on measurement \\"gpu\\" is type float, already exists as type '
                'integer dropped=1"}', about_frames=self.about_frames)
        return super().write(frames)


@pytest.mark.parametrize("about_frames", [False, True])
def test_frames_the_store_refuses_for_its_own_reason_are_still_judged(
        tmp_path: Path, about_frames: bool) -> None:
    ServerRefusing.about_frames = about_frames
    bus = MemoryBus()
    db = tmp_path / "s.db"
    processor = Processor(ServerRefusing(db), [GpuTemperatureLimit(85.0, 0.0)],
                          dead_letters=bus.producer(), dead_letter_topic=DEAD)
    with Running(bus, processor, batch=10):
        send(bus, [frame("bad", T0 + i, 95.0) for i in range(5)]
             + [frame("good", T0 + i) for i in range(5)])
        wait_for(lambda: bus._committed.get((TOPIC, "g")) == 10)
    assert stored(db) == 5 * 2
    dead = bus.messages(DEAD)
    assert len(dead) == 5
    reason = dict(dead[0].headers)["reason"].decode()
    assert "field type conflict" in reason
    if about_frames:  # a frame wrong in itself (its time): not judged
        assert processor.alerts.open == []
    else:  # the store's own reason: judged, and the dead letter says what to do
        assert [(a.node, a.rule) for a in processor.alerts.open] == [
            ("bad", "gpu_temp_high")]
        assert "DROP SHARD" in reason and "still judged" in reason


def test_a_servers_refusal_is_the_frames_unless_it_names_the_servers_own_state() -> None:
    """A 4xx the line-protocol writer cannot place: the frames' fault (not judged), as a
    time past VictoriaMetrics' retention; a field type conflict or a series limit: the
    server's own state (the frames still judged)."""
    from fleetwatch.pipeline.store.lpwriter import store_own_reason
    assert not store_own_reason("cannot insert row with too big timestamp 4084473600000")
    assert not store_own_reason("partial write: points beyond retention policy dropped=3")
    assert store_own_reason('partial write: field type conflict: input field "temp_c" on '
                            'measurement "gpu" is type float, already exists as type integer')
    assert store_own_reason("partial write: max-series-per-database limit exceeded: (2000)")
