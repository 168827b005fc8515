"""A board replaced in its slot, through the real Processor and an embedded store: what
the detectors say of the new board is judged on its own, not by what they had learned of
the old one (its hot offset, its error counters, its falling off the bus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.lemon import LemonScore
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = 1.8e9
OLD = "GPU-11111111-2222-3333-4444-555555555555"
NEW = "GPU-99999999-8888-7777-6666-555555555555"


def test_a_lemon_score_rebuilt_from_the_store_counts_a_new_boards_loss_as_its_own(
        tmp_path: Path) -> None:
    """The old board fell off the bus (XID 79, then lost: one incident), the new board in
    its slot was lost too, all stored by a processor; a processor started later rebuilds
    the node's score from the stored events with both incidents, as the live score has."""
    def gpu0(board: str, lost: bool, xids: tuple[int, ...] = ()) -> GpuReading:
        return GpuReading(0, board, "NVIDIA H100 80GB HBM3", {} if lost else
                          {"gpu_temp_c": 50.0}, state="lost" if lost else "ok", xids=xids)

    def at(ts: float, g: GpuReading) -> Frame:
        return Frame("c", "r", "node-0", T0 + ts, (g,))

    store = SqliteStore(tmp_path / "s.db")
    Processor(store, []).process([at(0, gpu0(OLD, False, (79,))), at(10, gpu0(OLD, True)),
                                  at(600, gpu0(NEW, True))])
    live = LemonScore(threshold=100.0)
    for ts, g in ((0, gpu0(OLD, False, (79,))), (10, gpu0(OLD, True)), (600, gpu0(NEW, True))):
        live.update([at(ts, g)])
    rebuilt = LemonScore(threshold=100.0)
    rebuilt.use_events(store.events)
    rebuilt.update([at(700, gpu0(NEW, True))])
    assert live.score("c", "node-0", T0 + 700) == pytest.approx(10.0, abs=0.01)
    assert rebuilt.score("c", "node-0", T0 + 700) == pytest.approx(10.0, abs=0.01)
    store.close()
