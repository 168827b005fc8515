"""A GPU that answers no NVML call (Unknown, Timeout) while its node's other GPUs do is
reported lost after as many of its intervals as replay waits, and ok again once it
answers; NVML XID events that name no GPU of the node are counted, not kept under -1."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pynvml
import pytest

from fleetwatch.collectors.exporter import Exporter, render
from fleetwatch.collectors.node import node_source
from fleetwatch.collectors.nvml import FakeNvml, NvmlReader
from fleetwatch.collectors.nvml.reader import LOST_AFTER_INTERVALS
from fleetwatch.config import DetectorsConfig
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.recorded_ticks import LOST_AFTER_INTERVALS as REPLAY_LOST_AFTER
from fleetwatch.wiring import detectors
from tests.collectors.conftest import Clock, NodeTree
from tests.collectors.test_node import config

States = list[tuple[int, str, str]]


def reader_of(nv: FakeNvml, states: States, slow_every: int = 12,
              dropped: list[str] | None = None) -> NvmlReader:
    return NvmlReader.open(nv, slow_every=slow_every,
                           on_state=lambda i, uuid, state, why: states.append((i, state, why)),
                           on_dropped=None if dropped is None else dropped.append)


def test_the_agent_and_replay_wait_the_same_number_of_intervals() -> None:
    assert LOST_AFTER_INTERVALS is REPLAY_LOST_AFTER


@pytest.mark.parametrize("error", [pynvml.NVMLError_Unknown(), pynvml.NVMLError_Timeout()])
def test_a_gpu_that_answers_nothing_is_lost_after_the_intervals_replay_waits(
        error: pynvml.NVMLError) -> None:
    nv = FakeNvml.of(4)
    states: States = []
    reader = reader_of(nv, states)
    reader.read()
    nv.fail_all(2, error)
    seen = [reader.read().gpus[2] for _ in range(LOST_AFTER_INTERVALS + 1)]
    # As replay reads a GPU whose samples stopped for more than LOST_AFTER_INTERVALS of
    # its intervals: ok (empty) for that many ticks, lost at the next.
    assert [g.state for g in seen] == ["ok"] * LOST_AFTER_INTERVALS + ["lost"]
    assert all(g.metrics == {} for g in seen)
    kind = type(error).__name__.removeprefix("NVMLError_").upper()
    assert states == [(2, "lost", f"answered no NVML call for {LOST_AFTER_INTERVALS + 1} "
                                  f"ticks in a row (last error: {kind}) while the node's other "
                                  "GPUs did")]
    # Lost: its calls are no longer made every tick (each may block for seconds).
    calls = nv.calls
    reader.read()
    assert nv.calls - calls < 40


def test_it_stays_lost_while_it_answers_nothing_and_is_ok_again_when_it_answers() -> None:
    nv = FakeNvml.of(4)
    states: States = []
    reader = reader_of(nv, states, slow_every=3)
    nv.fail_all(1, pynvml.NVMLError_Unknown())
    gpus = [reader.read().gpus[1] for _ in range(12)]
    # The re-probe (every 3 ticks) finds it still mute: no "ok" between, no new report.
    assert [g.state for g in gpus[LOST_AFTER_INTERVALS + 1:]] == ["lost"] * 8
    assert [(i, s) for i, s, _ in states] == [(1, "lost")]
    nv.fail_all(1, None)
    back = [reader.read().gpus[1] for _ in range(3)]
    assert back[-1].state == "ok" and back[-1].metrics["gpu_temp_c"] == 61
    assert back[-1].uuid == nv.gpus[1].uuid
    assert [(i, s) for i, s, _ in states] == [(1, "lost"), (1, "ok")]
    # And once back it is judged afresh: a single bad tick is not a loss.
    nv.fail_all(1, pynvml.NVMLError_Unknown())
    assert reader.read().gpus[1].state == "ok"


def test_when_every_gpu_of_the_node_is_mute_none_is_called_lost() -> None:
    # As replay: a node whose GPUs all stop has no GPU going on (the driver, the node).
    nv = FakeNvml.of(2)
    states: States = []
    reader = reader_of(nv, states)
    for i in range(2):
        nv.fail_all(i, pynvml.NVMLError_Unknown())
    assert {g.state for _ in range(8) for g in reader.read().gpus} == {"ok"}
    assert states == []


def test_a_gpu_without_any_supported_metric_is_not_mute() -> None:
    """Answers of NotSupported are answers: absent metrics are not silence."""
    nv = FakeNvml.of(2)
    for method in list(nv.gpus[1].answers):
        if method not in ("register_events",):
            nv.fail(1, method, pynvml.NVMLError_NotSupported())
    nv.gpus[1].fields = {}
    nv.gpus[1].gpm = None
    nv.gpus[1].nvlinks = 0
    states: States = []
    reader = reader_of(nv, states)
    assert {reader.read().gpus[1].state for _ in range(8)} == {"ok"}
    assert states == []


def test_through_the_processor_a_mute_gpu_pages_and_counts_as_lost(
        tree: NodeTree, clock: Clock, tmp_path: Path) -> None:
    """hw #4: 8 GPUs at 5 s; GPU 3 answers only Unknown from the sixth tick on."""
    nv = FakeNvml.of(8)
    source = node_source(config(tree), nvml=nv, clock=clock)
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, detectors(DetectorsConfig()))
    exporter = Exporter(hostname="n")
    ts = time.time() - 600
    for k in range(24):
        if k == 6:
            nv.fail_all(3, pynvml.NVMLError_Unknown())
        clock.advance(5)
        ts += 5
        [frame] = source.frames(ts)
        exporter.update(frame)
        processor.process([frame])
    assert frame.gpus[3].state == "lost"
    assert [g.index for g in frame.gpus if g.state == "lost"] == [3]
    lost = [a for a in store.alerts(("pending", "firing")) if a.rule == "gpu_lost"]
    assert [(a.node, a.device, a.state, a.severity) for a in lost] == [
        ("gpu-node-042", "gpu3", "firing", "critical")]
    text = render(exporter.collect()).decode()
    assert 'fleetwatch_gpus_lost{Hostname="n"} 1.0' in text
    store.close()


def test_xid_events_that_name_no_gpu_are_counted_and_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """hw #8: the backend could not map an event's handle to an index (-1)."""
    nv = FakeNvml.of(2)
    dropped: list[str] = []
    reader = reader_of(nv, [], dropped=dropped)
    nv._events.extend([(-1, 48), (-1, 79), (0, 13)])
    with caplog.at_level(logging.WARNING, "fleetwatch.collectors.nvml.reader"):
        gpus = reader.read().gpus
        nv._events.append((-1, 48))
        reader.read()
    assert [g.xids for g in gpus] == [(13,), ()]
    assert all(g.state == "ok" for g in gpus)  # an XID 79 of no known GPU loses none
    assert dropped == ["xid_unknown_gpu"] * 3
    said = [r.getMessage() for r in caplog.records if "XID" in r.getMessage()]
    assert said == ["NVML reported XID 48 for a GPU it could not name (not one of this "
                    "node's 2 GPUs as opened); not attributed, counted in "
                    "fleetwatch_agent_input_dropped{reason=\"xid_unknown_gpu\"}"]
